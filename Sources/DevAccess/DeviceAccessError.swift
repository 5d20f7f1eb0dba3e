import DevAccessCore
import DevAccessProtocol

/// Why a `DeviceAccess` call did not give what was asked for.
///
/// Each case says what to do next in its text (``description``). The permission cases
/// name the permission, so a caller that asked for several knows which one failed.
public enum DeviceAccessError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No hardware serves the permission on this machine (no camera, no GPS receiver), or
    /// its service cannot serve now (gpsd not running, no fix yet).
    case unsupported(Permission, reason: String)
    /// The user, or an administrator, said no, and devaccessd remembers it: asking again
    /// does not prompt. `devaccess reset` forgets a user's own denial.
    case denied(Permission, reason: String)
    /// The machine's policy forbids it for this user or program; no request can change
    /// that. Only an administrator (devaccess.conf) can.
    case restricted(Permission, reason: String)
    /// Nobody decided: the prompt was dismissed or timed out, an administrator declined
    /// the request, or a password was wrong every time. Nothing was recorded; asking
    /// again asks again.
    case notDecided(Permission, reason: String)
    /// devaccessd could not ask a person where the requesting program cannot answer for
    /// them (no login terminal it trusts, or a password prompt this library cannot show):
    /// run the program from a login terminal, or have an administrator grant it.
    case noConsentChannel(Permission, reason: String)
    /// devaccessd is not running, or its socket is not reachable.
    case brokerUnavailable(String)
    /// devaccessd is at a limit (its connections, the user's open prompts or waiting
    /// requests, the user's changes per minute); the reason says which. Try again later.
    case busy(String)
    /// The call itself is not the caller's to make: another user's status without being
    /// root or in devaccessd's admin group. Recorded by devaccessd as a refusal.
    case notPermitted(String)
    /// The user a call names does not exist.
    case noSuchUser(String)
    /// The calling task was cancelled; a request that was waiting was withdrawn.
    case cancelled
    /// devaccessd answered something this library does not understand (an older or newer
    /// broker), or refused a message as malformed.
    case `protocol`(String)

    /// The permission the error is about, when it is about one.
    public var permission: Permission? {
        switch self {
        case .unsupported(let permission, _), .denied(let permission, _), .restricted(let permission, _),
             .notDecided(let permission, _), .noConsentChannel(let permission, _):
            return permission
        case .brokerUnavailable, .busy, .notPermitted, .noSuchUser, .cancelled, .protocol:
            return nil
        }
    }

    public var description: String {
        switch self {
        case .unsupported(let permission, let reason):
            return "\(permission) is not available on this machine: \(reason)"
        case .denied(let permission, let reason):
            return "\(permission) was denied: \(reason) ('devaccess reset \(permission)' forgets your own denial)"
        case .restricted(let permission, let reason):
            return "\(permission) is restricted by the machine's policy: \(reason) (an administrator can change it)"
        case .notDecided(let permission, let reason):
            return "nobody decided about \(permission): \(reason); asking again asks again"
        case .noConsentChannel(let permission, let reason):
            return "devaccessd cannot ask you about \(permission) here: \(reason); run the program from your login "
                + "terminal, or ask an administrator to grant it"
        case .brokerUnavailable(let reason):
            return "devaccessd is not available: \(reason)"
        case .busy(let reason):
            return "devaccessd is busy: \(reason); try again later"
        case .notPermitted(let reason):
            return "devaccessd refused (permission-denied): \(reason)"
        case .noSuchUser(let reason):
            return reason
        case .cancelled:
            return "cancelled; a request that was waiting was withdrawn"
        case .protocol(let reason):
            return "devaccessd's answer breaks the protocol: \(reason); is devaccessd the same version as this program?"
        }
    }
}

extension DeviceAccessError {
    /// A failure of the blocking client: an unreachable broker, or its error frame.
    init(_ error: BrokerClientError, permission: Permission? = nil) {
        switch error {
        case .unreachable, .timedOut, .closed, .io:
            self = .brokerUnavailable(error.description)
        case .badReply(_, let frame):
            self = .protocol(frame.description)
        case .rejected(let frame):
            self = DeviceAccessError(frame, permission: permission)
        }
    }

    /// devaccessd's error frame for a call about `permissions`: the one its context names
    /// (`$.permissions[1]`), else the only one.
    init(_ frame: ProtocolError, permissions: [Permission]) {
        var named: Permission? = permissions.count == 1 ? permissions.first : nil
        if let open = frame.context.lastIndex(of: "["), let close = frame.context.lastIndex(of: "]"), open < close,
           let index = Int(frame.context[frame.context.index(after: open)..<close]), permissions.indices.contains(index) {
            named = permissions[index]
        }
        self.init(frame, permission: named)
    }

    /// devaccessd's error frame, for a call about `permission` (when it is about one).
    init(_ frame: ProtocolError, permission: Permission?) {
        switch frame.code {
        case .busy:
            self = .busy(frame.reason)
        case .noSuchUser:
            self = .noSuchUser(frame.reason)
        case .permissionDenied:
            if let permission { self = .denied(permission, reason: frame.reason) } else { self = .notPermitted(frame.reason) }
        case .unavailable:
            if let permission { self = .unsupported(permission, reason: frame.reason) } else {
                self = .brokerUnavailable(frame.reason)
            }
        case .unknownPermission:
            if let permission {
                self = .unsupported(permission, reason: frame.reason)
            } else {
                self = .protocol("\(frame.code): \(frame.description)")
            }
        default:
            self = .protocol("\(frame.code): \(frame.description)")
        }
    }
}
