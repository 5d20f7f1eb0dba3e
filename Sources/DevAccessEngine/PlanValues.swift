import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessProtocol
import DevAccessInterface

/// A decision to record: what policy, a prompt or a password produced for one permission.
public struct GrantPlan: Sendable {
    public var permission: Permission
    public var decision: Decision
    public var term: ResolvedTerm
    public var method: DecisionMethod
    public var decidedBy: Principal
    /// A location level the person chose below the request's (nil: as the request gets it).
    public var accuracy: LocationAccuracy?

    public init(permission: Permission, decision: Decision, term: ResolvedTerm, method: DecisionMethod,
                decidedBy: Principal, accuracy: LocationAccuracy? = nil) {
        self.permission = permission
        self.decision = decision
        self.term = term
        self.method = method
        self.decidedBy = decidedBy
        self.accuracy = accuracy
    }
}

/// The location level a request asks for, and what the policy lets it have.
public struct LocationAsk: Sendable, Hashable {
    /// As asked (`--accuracy`; exact when not given).
    public var asked: LocationAccuracy
    /// `asked` under the policy's `MaxAccuracy=`: what a grant of this request records.
    public var granted: LocationAccuracy
    /// The cap, when it made `granted` coarser than `asked`.
    public var cappedBy: PolicyDecision.AccuracyCap?

    public init(asked: LocationAccuracy, policy: PolicyDecision) {
        self.asked = asked
        granted = policy.capping(asked)
        cappedBy = granted < asked ? policy.accuracyCap : nil
    }

    /// " (you asked for exact; the policy's MaxAccuracy=city (file:line) caps it)", or "".
    public var capNote: String {
        guard let cap = cappedBy else { return "" }
        return " (\(asked.rawValue) was asked; the policy's \(cap) caps location at \(granted.rawValue))"
    }
}

/// The answers every plan gives: what a grant stands for, and no decision.
extension RequestResult {
    /// The result a grant stands for. `term` is what was decided (a one-use grant is stored
    /// as `until`); nil reads it from the grant.
    public init(for grant: Grant, outcome: RequestOutcome, term: GrantTerm.Word?) {
        let stored = grant.scope
        let ends = grant.expires.map { ISOTime.format($0) }
        let verb = grant.decision == .allow ? "allowed" : "denied"
        var terms = (term ?? stored) == .always && grant.decision == .allow ? "until revoked"
            : grant.decision == .deny && grant.expires == nil ? "until reset" : ends.map { "until \($0)" } ?? ""
        if let holder = grant.holder {
            terms = "while process \(holder.pid) runs" + (ends.map { ", until \($0) at most" } ?? "")
        }
        let level = grant.locationLevel.map { " at \($0.rawValue) accuracy, \($0.approximately)," } ?? ""
        self.init(permission: grant.permission, outcome: outcome, how: grant.method, grant: grant.id,
                  term: term ?? stored, expires: ends, accuracy: grant.locationLevel,
                  message: "\(verb)\(level) \(terms) (grant \(grant.id), \(grant.method.rawValue))")
    }

    /// No decision for `permission`, for `why`: nothing was recorded.
    public static func undecided(_ permission: Permission, _ why: UndecidedReason) -> RequestResult {
        let text: String
        switch why {
        case .dismissed: text = "the prompt was dismissed"
        case .interrupted: text = "the prompt was interrupted"
        case .endOfInput: text = "the terminal reached end of input"
        case .noTerminal: text = "there was no terminal to ask on"
        case .timeout: text = "nobody answered in time"
        case .disconnected: text = "the client went away before answering"
        case .wrongPassword: text = "the password was wrong"
        case .authenticationFailed: text = "the password could not be checked (PAM failed; see the broker's log)"
        case .shutdown: text = "the broker is shutting down"
        }
        return RequestResult(permission: permission, outcome: .undecided, why: why,
                             message: "no decision: \(text); nothing was recorded, the next request asks again")
    }
}

extension ResolvedTerm {
    /// Whether this term, starting `now`, ends later than `grant`: a request that asks for
    /// it extends the grant (is decided again) rather than being "already allowed".
    func outlasts(_ grant: Grant, now: Date) -> Bool {
        switch term {
        case .once:
            return false
        case .always:
            return grant.scope != .always
        case .duration(let seconds):
            if grant.scope == .always { return false }
            // A grant that lasts while a process runs has no time to compare: a time is another term.
            guard let expires = grant.expires else { return grant.holder != nil }
            return now.addingTimeInterval(TimeInterval(seconds)) > expires
        }
    }
}
