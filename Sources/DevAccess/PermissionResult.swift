import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessProtocol
import DevAccessInterface

/// What one request did for one permission.
public struct PermissionResult: Sendable, Hashable {
    /// How the request ended for this permission.
    public enum Outcome: Sendable, Hashable {
        /// Allowed: by this request (`decidedNow`) or by an earlier decision.
        case allowed
        /// Denied: by this request, or by an earlier denial that stands.
        case denied
        /// The policy forbids it.
        case restricted
        /// No device serves it.
        case unsupported
        /// Nobody decided (see ``PermissionResult/message``); asking again asks again.
        case notDecided
        /// devaccessd could not ask a person (no trusted consent channel).
        case noConsentChannel
        /// Waiting for an administrator (`devaccess approve`), queue number given.
        case pending(Int64)
    }

    public var permission: Permission
    public var outcome: Outcome
    /// True when this request made the decision (a prompt, the policy, an administrator);
    /// false when an earlier one stands.
    public var decidedNow: Bool
    /// Who decided: `consent`, `auth_self`, `admin` or `policy`; nil without a decision.
    public var decidedBy: String?
    /// The term of the grant that allows it.
    public var term: AccessTerm?
    /// When that grant ends, when it ends at a known time.
    public var expires: Date?
    /// Location: the level granted.
    public var accuracy: LocationAccuracy?
    /// One sentence for people, from devaccessd.
    public var message: String
    /// The permission's status after the request (devices, reasons).
    public var status: PermissionStatus?

    /// Allowed now, by this request or an earlier decision.
    public var isAllowed: Bool { outcome == .allowed }

    init(_ result: RequestResult, status: PermissionStatus?) {
        permission = result.permission
        message = result.message
        self.status = status
        accuracy = result.accuracy
        decidedBy = result.how?.rawValue
        decidedNow = [.granted, .denied].contains(result.outcome)
        switch result.outcome {
        case .granted, .alreadyAllowed: outcome = .allowed
        case .denied, .alreadyDenied: outcome = .denied
        case .restricted: outcome = .restricted
        case .unavailable: outcome = .unsupported
        case .pending: outcome = .pending(result.pending ?? 0)
        case .undecided: outcome = result.why == .noTerminal ? .noConsentChannel : .notDecided
        }
        switch result.term {
        case .once?: term = .once
        case .always?: term = .always
        case .duration?:
            term = nil
            if let text = result.expires, let end = ISOTime.parse(text) {
                expires = end
                term = .for(.seconds(max(0, Int64(end.timeIntervalSinceNow.rounded()))))
            }
        case nil: term = nil
        }
        if expires == nil, let text = result.expires { expires = ISOTime.parse(text) }
    }

    /// The error a required permission that ended this way throws; nil when allowed.
    /// Pending counts as not decided: the caller did not wait for the administrator.
    var requiredFailure: DeviceAccessError? {
        switch outcome {
        case .allowed: return nil
        case .denied: return .denied(permission, reason: message)
        case .restricted: return .restricted(permission, reason: message)
        case .unsupported: return .unsupported(permission, reason: message)
        case .notDecided, .pending: return .notDecided(permission, reason: message)
        case .noConsentChannel: return .noConsentChannel(permission, reason: message)
        }
    }
}

/// The results of one request, one per permission, in the order asked.
public struct RequestResults: Sendable, Hashable, RandomAccessCollection {
    public let results: [PermissionResult]

    public var startIndex: Int { results.startIndex }
    public var endIndex: Int { results.endIndex }
    public subscript(position: Int) -> PermissionResult { results[position] }

    /// The result for `permission`, if it was asked for.
    public subscript(_ permission: Permission) -> PermissionResult? {
        results.first { $0.permission == permission }
    }

    /// The permissions allowed now.
    public var allowed: [Permission] { results.filter(\.isAllowed).map(\.permission) }
}
