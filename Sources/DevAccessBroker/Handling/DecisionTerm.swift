import Foundation
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol

/// How long a decision made through a request holds, after policy had its say.
enum DecisionTerm: Sendable, Hashable {
    /// One use: the entries stay for a short window, long enough to open the device
    /// (an open descriptor outlives the entry). Bound to one `devaccess run` once that exists.
    case once(seconds: Int64)
    case duration(seconds: Int64)
    case always

    /// The window of a one-use grant.
    static let oneUseSeconds: Int64 = 300
    /// What "allow for a time" offers when neither the request nor Keep= names a duration.
    static let defaultAskSeconds: Int64 = 3600

    /// The request's scope, else the policy's Keep=, else once; then capped by MaxDuration=
    /// (`always` becomes MaxDuration).
    static func resolve(_ requested: RequestScope?, policy: PolicyDecision) -> DecisionTerm {
        let term: DecisionTerm
        switch requested {
        case nil: term = policy.keepSeconds.map { .duration(seconds: $0) } ?? .once(seconds: oneUseSeconds)
        case .once: term = .once(seconds: oneUseSeconds)
        case .duration(let seconds): term = .duration(seconds: seconds)
        case .always: term = .always
        }
        return term.capped(policy.maxDurationSeconds)
    }

    static func resolve(_ requested: PendingScope?, policy: PolicyDecision) -> DecisionTerm {
        switch requested {
        case nil: return resolve(RequestScope?.none, policy: policy)
        case .once: return resolve(RequestScope.once, policy: policy)
        case .duration(let seconds): return resolve(RequestScope.duration(seconds: seconds), policy: policy)
        case .always: return resolve(RequestScope.always, policy: policy)
        }
    }

    func capped(_ maximum: Int64?) -> DecisionTerm {
        guard let maximum, maximum > 0 else { return self }
        switch self {
        case .once(let seconds): return .once(seconds: min(seconds, maximum))
        case .duration(let seconds): return .duration(seconds: min(seconds, maximum))
        case .always: return .duration(seconds: maximum)
        }
    }

    var wire: RequestTerm {
        switch self {
        case .once: return .once
        case .duration: return .forDuration
        case .always: return .always
        }
    }

    /// The ledger's scope and expiry. A one-use grant is stored as `until` its window
    /// ends: the engine applies `once` grants only to a `devaccess run`.
    func grant(at now: Date) -> (GrantScope, Date?) {
        switch self {
        case .once(let seconds), .duration(let seconds):
            return (.until, now.addingTimeInterval(TimeInterval(seconds)))
        case .always:
            return (.always, nil)
        }
    }

    /// "once (for the next 5m)", "for 1h", "always".
    var text: String {
        switch self {
        case .once(let seconds): return "once (for the next \(DurationText.format(seconds: seconds)))"
        case .duration(let seconds): return "for \(DurationText.format(seconds: seconds))"
        case .always: return "always"
        }
    }
}

extension RequestScope {
    var pending: PendingScope {
        switch self {
        case .once: return .once
        case .duration(let seconds): return .duration(seconds: seconds)
        case .always: return .always
        }
    }
}

/// Texts of prompts and results, in one place.
enum RequestText {
    /// "the camera", "the camera and the microphone", "the camera, the microphone and location".
    static func list(_ permissions: [Permission]) -> String {
        let names = permissions.map { $0 == .location ? "location" : "the \($0.rawValue)" }
        guard names.count > 1, let last = names.last else { return names.first ?? "nothing" }
        return names.dropLast().joined(separator: ", ") + " and " + last
    }

    /// The question, with what asks (the requester: for the CLI, the program that ran
    /// it), which devices and why.
    static func question(_ permissions: [Permission], term: String?, user: UserIdentity, peer: Peer,
                         requester: Requester, devices: [PromptDevice], reason: String?) -> String {
        // Everything but our own words comes from the requester or from hardware: one line
        // each, so none of it can draw lines of its own under the question.
        let line = { (text: String) in TerminalPrompt.oneLine(text) }
        var text = "Allow \(line(requester.described)) to use \(list(permissions))" + (term.map { " \($0)" } ?? "")
            + "?\n"
        text += "  requested by: \(line(user.name)) (uid \(user.uid)), process \(peer.pid)\n"
        if let cli = requester.cli {
            text += requester.isShell
                ? "  typed at: the shell above ran \(line(cli.path)) (pid \(cli.pid)): typed by a person, or run by a shell script\n"
                : "  through: \(line(cli.path)) (pid \(cli.pid)), which this program ran\n"
        }
        if let untrusted = requester.untrusted {
            text += "  note: \(line(untrusted)); rules for this program do not apply\n"
        }
        // The CLI is rarely what wants the camera: say what started it.
        if !peer.ancestry.isEmpty {
            text += "  started by: " + peer.ancestry.map(line).joined(separator: " <- ") + "\n"
        }
        if devices.isEmpty {
            text += "  devices: none present now; the decision applies to those that appear\n"
        } else {
            text += "  devices: " + devices.map { "\(line($0.name)) [\(line($0.id))]" }.joined(separator: ", ") + "\n"
        }
        text += "  reason: " + (reason.map { $0.isEmpty ? "(none given)" : line($0) } ?? "(none given)")
        return text
    }
}
