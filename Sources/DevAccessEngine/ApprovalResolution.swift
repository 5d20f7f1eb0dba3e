import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// An administrator's `approve` or `reject` of a pending request, as the engine does it:
/// the verdict, what it found and did (`Resolving`), and what that answers. Values in,
/// values out; the daemon only wakes the requesters who wait and replies.
extension ApprovalPlan {
    /// What an administrator decided about a pending request.
    public enum Verdict: Sendable, Hashable {
        /// The term chosen (nil: as requested).
        case approve(GrantTerm?)
        case deny
        case decline

        /// `approve` with its term; `reject` with `deny` a denial, without a decline.
        public init(_ action: PendingAction, approve: Bool) {
            self = approve ? .approve(action.scope) : action.deny ? .deny : .decline
        }

        public var resolution: Resolution {
            switch self {
            case .approve: return .approved
            case .deny: return .rejected
            case .decline: return .declined
            }
        }

        /// The operation's name, for refusals and the audit: `approve` or `reject`.
        public var operation: String {
            if case .approve = self { return "approve" }
            return "reject"
        }
    }

    /// What approving or rejecting found and did.
    public enum Resolving: Sendable {
        case notFound(Int64)
        case alreadyResolved(PendingRequest)
        /// The request's uid names another user now (`now`; nil: none): deleted, and its uid
        /// handed to someone who never asked (useradd reuses the highest uid). Nothing decided.
        case subjectChanged(PendingRequest, now: String?)
        case done(PendingRequest, [RequestResult])
        /// Resolved, but the engine failed for some permissions (not the policy's refusal,
        /// which is `restricted`): what held, and what failed.
        case failed(PendingRequest, held: [RequestResult], failures: [(Permission, EnforcementError)])

        /// The resolved request and what a requester waiting for it hears; nil when nothing
        /// was resolved. For a permission that failed it hears the request's resolution
        /// (`QueuePlan.result`), and its decision's statuses, computed afresh, say where it stands.
        public var resolved: (request: PendingRequest, results: [RequestResult])? {
            switch self {
            case .notFound, .alreadyResolved, .subjectChanged: return nil
            case .done(let request, let results): return (request, results)
            case .failed(let request, let held, _): return (request, held)
            }
        }
    }

    /// The engine operation behind `approve`/`reject`, on the engine queue: the decisions and
    /// the request's resolution written in one transaction (`Enforcer.resolve`, as the
    /// administrator), then applied. A crash leaves the request waiting with no decision, or
    /// resolved with all of them; a permission the engine refuses (the policy forbids it by
    /// now) is `restricted` alone. `policy`: as read when the verdict came in.
    public static func resolve(_ id: Int64, verdict: Verdict, note: String, admin: Principal, policy: Policy,
                               enforcer engine: Enforcer) throws(EnforcementError) -> (Resolving, EnforcementReport) {
        let chosen: GrantTerm?
        switch verdict {
        case .approve(let scope): chosen = scope
        case .deny: chosen = nil
        case .decline: return try decline(id, note: note, admin: admin, ledger: engine.ledger)
        }
        let approve = verdict.resolution == .approved
        let (request, user): (PendingRequest, UserIdentity)
        switch try decidable(id, engine: engine) {
        case .decidable(let found, let named): (request, user) = (found, named)
        case .answered(let resolving): return (resolving, EnforcementReport())
        }
        let enforcer = engine.acting(as: admin)
        let switches = try EnforcementError.ledgerWork { () throws(LedgerError) in try engine.ledger.switches() }
        let reason = "\(approve ? "approved" : "rejected") request \(request.id)" + (note.isEmpty ? "" : ": \(note)")
        let plan = ApprovalPlan(request, approve: approve, chosen: chosen, policy: policy, user: user,
                                switches: switches, reason: reason, clock: { enforcer.clock() })
        // Each decision has its own result (`Enforcer.resolve`): one the engine refuses fails
        // alone, and the request is resolved with the rest.
        let (resolved, decided) = try enforcer.resolve(id, as: approve ? .approved : .rejected, decisions: plan.decisions,
                                                       note: note)
        let (results, failed) = plan.results(decided, permissions: request.permissions, approve: approve)
        let report = decided.compactMap { try? $0.get().report }.last ?? EnforcementReport()
        guard failed.isEmpty else { return (.failed(resolved, held: results, failures: failed), report) }
        return (.done(resolved, results), report)
    }

    /// A pending request found, with the user its uid names now; else what the
    /// administrator is answered instead.
    public enum Decidable: Sendable {
        case decidable(PendingRequest, UserIdentity)
        case answered(Resolving)
    }

    /// The waiting request `id` and its user. The administrator was shown the name the
    /// request recorded; a uid that names another user now (a subordinate uid, with no
    /// passwd entry, is named by its number) is not decided for: approving would grant
    /// whoever has the uid now.
    public static func decidable(_ id: Int64, engine: Enforcer) throws(EnforcementError) -> Decidable {
        let found = try EnforcementError.ledgerWork { () throws(LedgerError) in try engine.ledger.pendingRequest(id: id) }
        guard let request = found else { return .answered(.notFound(id)) }
        guard request.isWaiting else { return .answered(.alreadyResolved(request)) }
        let current = engine.identities(request.subject.uid)
        guard (current?.name ?? String(request.subject.uid)) == request.subject.name else {
            return .answered(.subjectChanged(request, now: current?.name))
        }
        return .decidable(request, current
            ?? UserIdentity(uid: request.subject.uid, name: request.subject.name, primaryGID: UInt32.max, groups: []))
    }

    /// `reject` without `deny`: the request ends as declined; nothing is decided.
    static func decline(_ id: Int64, note: String, admin: Principal,
                        ledger: Ledger) throws(EnforcementError) -> (Resolving, EnforcementReport) {
        try EnforcementError.ledgerWork { () throws(LedgerError) -> (Resolving, EnforcementReport) in
            guard let request = try ledger.pendingRequest(id: id) else { return (.notFound(id), EnforcementReport()) }
            guard request.isWaiting else { return (.alreadyResolved(request), EnforcementReport()) }
            let resolved = try ledger.resolvePendingRequest(id: id, as: .declined, by: admin, note: note)
            return (.done(resolved, resolved.permissions.map { declined($0, id: id, by: admin) }), EnforcementReport())
        }
    }

    /// What a requester is told of a request an administrator declined: no decision.
    public static func declined(_ permission: Permission, id: Int64, by: Principal?) -> RequestResult {
        RequestResult(permission: permission, outcome: .undecided, why: .dismissed,
                      message: "request \(id) was declined" + (by.map { " by \($0.name)" } ?? "")
                          + "; no decision was recorded, a new request is queued again")
    }
}

extension ApprovalPlan.Resolving {
    /// What the administrator is answered: the resolution, or why there is none (or why
    /// some permission's decision failed, and what held).
    public func answer(_ verdict: ApprovalPlan.Verdict) -> Result<ResolvedReply, InterfaceError> {
        switch self {
        case .notFound(let id):
            return .failure(.notFound("there is no request \(id); 'devaccess pending' lists those waiting"))
        case .alreadyResolved(let request):
            var text = "request \(request.id) was already \(request.resolution?.rawValue ?? "resolved")"
            if let by = request.resolvedBy { text += " by \(by.name)" }
            if let when = request.resolved { text += " at \(ISOTime.format(when))" }
            return .failure(.notFound(text))
        case .subjectChanged(let request, let now):
            let uid = request.subject.uid
            let who = now.map { "is \($0)'s now" } ?? "names no user now"
            return .failure(.badArgument("request \(request.id) was made by \(request.subject.name) (uid \(uid)), and "
                + "uid \(uid) \(who): deciding it would decide for someone who did not ask; nothing was decided; "
                + "decline it with 'devaccess reject \(request.id)'"))
        case .done(let request, let results):
            return .success(ResolvedReply(pending: request.id, resolution: verdict.resolution,
                                          user: request.subject.name, uid: request.subject.uid, results: results))
        case .failed(let request, let held, let failures):
            let text = failures.map { "\($0.rawValue): \($1.description)" }
            let rest = held.map { "\($0.permission.rawValue): \($0.outcome.rawValue), \($0.message)" }
            return .failure(.failed("request \(request.id) was \(verdict.resolution.rawValue), but the decision failed "
                + "for " + text.joined(separator: "; ") + (rest.isEmpty ? "" : "; the rest: " + rest.joined(separator: "; "))))
        }
    }
}

extension PendingItem {
    /// A waiting request as `pending` lists it.
    public init(_ request: PendingRequest) {
        self.init(pending: request.id, user: request.subject.name, uid: request.subject.uid, program: request.program,
                  permissions: request.permissions, reason: request.reason.isEmpty ? nil : request.reason,
                  term: request.scope, accuracy: request.locationLevel, created: ISOTime.format(request.created))
    }
}
