import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// The approval queue (policy auth_admin) on the engine: who may list, approve and reject
/// (the one table: `administer`), and what a verdict decides (`ApprovalPlan.resolve`). In
/// `--offline` the resolution is recorded and nobody waits; devaccessd wakes its waiting
/// requesters with `resolution`'s outcome.
extension EngineService {
    /// Administrators see every waiting request; anyone else sees their own.
    public func pending() async throws(InterfaceError) -> PendingListReply {
        let uid: UInt32? = caller.may(.administer) ? nil : caller.uid
        return try await runner.run("pending") { (engine) throws(EnforcementError) -> (PendingListReply, EnforcementReport) in
            let waiting = try EnforcementError.ledgerWork { () throws(LedgerError) in try engine.ledger.pendingRequests(uid: uid) }
            return (PendingListReply(requests: waiting.map(PendingItem.init)), EnforcementReport())
        }
    }

    /// Grants each permission as an administrator's decision (how=admin), with the term the
    /// administrator chose, else the one the requester asked for, under the policy that
    /// applies now (a permission the policy now forbids is not granted).
    public func approve(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply {
        let verdict = ApprovalPlan.Verdict(action, approve: true)
        return try await resolution(action, verdict: verdict).answer(verdict).get()
    }

    /// With `deny`: records a denial of each permission, which stays until `devaccess reset`;
    /// without: declines the request, recording no decision.
    public func reject(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply {
        let verdict = ApprovalPlan.Verdict(action, approve: false)
        return try await resolution(action, verdict: verdict).answer(verdict).get()
    }

    /// The verdict, authorized and done on the engine: what it found and did. The policy is
    /// `policy` when given, else the engine's as it is when the verdict takes its turn.
    public func resolution(_ action: PendingAction,
                           verdict: ApprovalPlan.Verdict) async throws(InterfaceError) -> ApprovalPlan.Resolving {
        let operation = verdict.operation
        try requireAdmin(operation, "\(operation) request \(action.pending)")
        let (admin, given, note) = (caller.principal, policy, action.reason ?? "")
        let outcome = try await runner.run(operation) {
            (engine) throws(EnforcementError) -> (Result<ApprovalPlan.Resolving, InterfaceError>, EnforcementReport) in
            let reading = given ?? engine.policy()
            guard case .loaded(let policy)? = reading else {
                return (.failure(Self.policyUnreadable(reading, verdict: verdict)), EnforcementReport())
            }
            let (resolving, report) = try ApprovalPlan.resolve(action.pending, verdict: verdict, note: note, admin: admin,
                                                               policy: policy, enforcer: engine)
            return (.success(resolving), report)
        }
        return try outcome.get()
    }

    /// Nothing is approved or rejected under a policy that cannot be read.
    static func policyUnreadable(_ reading: PolicyReading?, verdict: ApprovalPlan.Verdict) -> InterfaceError {
        var problem = "the engine applies no policy"
        if case .unreadable(let text)? = reading { problem = text }
        return .failed("the policy cannot be read, so nothing was "
            + "\(verdict.operation == "approve" ? "approved" : "rejected"): \(problem)")
    }
}
