import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// What an administrator's `approve` or `reject` (with `deny`) of a pending request comes
/// to before the engine records it: each permission's answer, decided here (restricted,
/// undecided) or by the decision at that index, written with the request's resolution in
/// one transaction (`Enforcer.resolve`). Pure: a test builds one without a daemon.
public struct ApprovalPlan: Sendable {
    enum Answer: Sendable {
        case final(RequestResult)
        case decision(Int, term: ResolvedTerm, capNote: String)
    }

    /// One per permission of the request, in its order.
    var answers: [Answer] = []
    /// The decisions the answers name, for `Enforcer.resolve`.
    public var decisions: [Enforcer.DecisionRequest] = []

    /// `user`: who the request's uid names now; `switches`: the privacy switches that are
    /// off; `clock`: when each decision is taken.
    public init(_ request: PendingRequest, approve: Bool, chosen: GrantTerm?, policy: Policy, user: UserIdentity,
                switches: [PrivacySwitch], reason: String, clock: () -> Date) {
        for permission in request.permissions {
            let decision = policy.requestDecision(for: permission, user: user, program: request.program)
            let term = approve ? decision.term(chosen ?? request.scope) : ResolvedTerm(.always)
            if let final = Self.final(permission, request: request, approve: approve, policy: decision, term: term,
                                      off: switches.first { $0.permission == permission }, user: user) {
                answers.append(.final(final))
                continue
            }
            // Location: the level the requester asked for, under the policy's cap now.
            let location = approve && permission == .location
                ? request.locationLevel.map { LocationAsk(asked: $0, policy: decision) } : nil
            answers.append(.decision(decisions.count, term: term, capNote: location?.capNote ?? ""))
            decisions.append(Enforcer.DecisionRequest(
                subject: request.subject, permission: permission, decision: approve ? .allow : .deny, term: term,
                from: clock(), holder: request.holder, reason: reason, accuracy: location?.granted))
        }
    }

    /// A permission answered without a decision: an approval of what is switched off or
    /// what the policy denies by now, or `once` where there is no process to last for.
    static func final(_ permission: Permission, request: PendingRequest, approve: Bool, policy: PolicyDecision,
                      term: ResolvedTerm, off: PrivacySwitch?, user: UserIdentity) -> RequestResult? {
        if approve, let off {
            return RequestResult(permission: permission, outcome: .restricted,
                message: "\(permission.rawValue) is " + off.sentence(formatTime: ISOTime.format)
                    + "; nothing was granted (turn it on with 'devaccess switch \(permission.rawValue) on' first)")
        }
        if approve && policy.action == .deny {
            return RequestResult(permission: permission, outcome: .restricted,
                message: policy.explanation(permission, user: user) + " now; nothing was granted")
        }
        if term.term == .once && request.holder == nil {
            // Queued before the requester's process was kept: there is no process to last for.
            return RequestResult(permission: permission, outcome: .undecided, why: .disconnected,
                message: "'once' lasts while the process that asked runs, and request \(request.id) does not "
                    + "name one; approve it with --for or --always; nothing was granted")
        }
        return nil
    }

    /// Each permission's result once the engine took the decisions (`decided`, in the order
    /// of `decisions`): one the engine refused fails alone, the rest hold.
    public func results(_ decided: [Enforcer.DecisionResult], permissions: [Permission], approve: Bool)
        -> (results: [RequestResult], failed: [(Permission, EnforcementError)]) {
        var failed: [(Permission, EnforcementError)] = []
        var results: [RequestResult] = []
        for (permission, answer) in zip(permissions, answers) {
            switch answer {
            case .final(let result): results.append(result)
            case .decision(let index, let term, let capNote):
                switch decided[index] {
                case .success(let outcome):
                    var done = RequestResult(for: outcome.grant, outcome: approve ? .granted : .denied,
                                             term: term.term.word)
                    done.message += capNote
                    results.append(done)
                case .failure(.policyForbids(let why)):
                    // The policy changed while the approval waited its turn (read above, applied by the engine).
                    results.append(RequestResult(permission: permission, outcome: .restricted,
                        message: why + " (the policy changed while this approval was decided); nothing was granted "
                            + "for \(permission.rawValue)"))
                case .failure(let error):
                    failed.append((permission, error))
                }
            }
        }
        return (results, failed)
    }
}
