import FoundationEssentials
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessEngine
import DevAccessInterface

/// The approval queue (policy auth_admin): requests wait in the ledger, so the requester
/// may leave and come back and the broker may restart; root and members of the admin
/// group list, approve and reject them.
extension BrokerService {
    // MARK: Requester side

    /// Queues the permissions no waiting request of this user covers yet, tells the client
    /// (`queued`), and with `wait` keeps the request open until an administrator decides
    /// or the client leaves.
    func queueForAdmin(_ group: [Permission], context: RequestContext, ledger: Ledger,
                       mayWait: Bool) async throws(LedgerError) -> [(Permission, RequestResult)] {
        var plan = QueuePlan(group, waiting: try ledger.pendingRequests(uid: context.user.uid), location: context.location)
        let uncovered = plan.uncovered
        if !uncovered.isEmpty {
            // Only a trusted program is kept: the approval matches `Program=` rules on it, and
            // `pending` shows it to the admin as what asked (an untrusted one is in the audit).
            // The level as asked: the cap is the policy's at approval, which applies it then.
            let queued = try ledger.queueRequest(NewPendingRequest(
                subject: context.subject, program: context.requester.policyProgram, permissions: uncovered,
                scope: context.request.scope, reason: context.reason, holder: context.holder,
                accuracy: uncovered.contains(.location) ? context.location?.asked : nil))
            plan.queued(queued.id)
            log.notice("request queued for an administrator", [
                "pending": String(queued.id), "uid": String(context.user.uid),
                "permissions": uncovered.map(\.rawValue).joined(separator: " ")])
        }
        let wait = mayWait && context.request.wait && context.exchange != nil && context.exchange?.departure == nil
        for id in plan.ids {
            context.exchange?.send(.queued(QueuedReply(pending: id, permissions: plan.permissions(of: id),
                                                       new: plan.fresh.contains(id), waiting: wait)), awaitingAnswer: false)
        }
        var outcomes: [Int64: ApprovalWaiters.Outcome] = [:]
        if wait, let exchange = context.exchange {
            outcomes = await awaitResolution(of: Set(plan.ids), exchange: exchange, ledger: ledger)
        }
        return group.map { permission in
            let outcome = plan.pendingOf[permission].flatMap { outcomes[$0] }
            return (permission, plan.result(permission, resolved: outcome.map { ($0.request, $0.results) }, waited: wait))
        }
    }

    /// Waits, holding no thread, until every request in `ids` is resolved or the client
    /// leaves (then the requests stay queued).
    private func awaitResolution(of ids: Set<Int64>, exchange: Exchange,
                                 ledger: Ledger) async -> [Int64: ApprovalWaiters.Outcome] {
        let state = Mutex<(outcomes: [Int64: ApprovalWaiters.Outcome], tokens: [UInt64])>(([:], []))
        let approvals = self.approvals
        let outcomes: [Int64: ApprovalWaiters.Outcome] = await withCheckedContinuation { continuation in
            let once = ResumeOnce(continuation)
            once.whenResumed {
                for token in state.withLock({ $0.tokens }) { approvals.cancel(token) }
            }
            for id in ids {
                let token = approvals.wait(for: id) { outcome in
                    let all = state.withLock { state -> [Int64: ApprovalWaiters.Outcome]? in
                        state.outcomes[id] = outcome
                        return Set(state.outcomes.keys) == ids ? state.outcomes : nil
                    }
                    if let all { once.resume(all) }
                }
                state.withLock { $0.tokens.append(token) }
            }
            exchange.listen { event in
                if case .departed = event { once.resume(state.withLock { $0.outcomes }) }
            }
            // Resolved between queueing and registering: answer from the ledger.
            for id in ids {
                guard let request = try? ledger.pendingRequest(id: id), !request.isWaiting else { continue }
                let all = state.withLock { state -> [Int64: ApprovalWaiters.Outcome]? in
                    if state.outcomes[id] == nil {
                        state.outcomes[id] = ApprovalWaiters.Outcome(request: request, results: [])
                    }
                    return Set(state.outcomes.keys) == ids ? state.outcomes : nil
                }
                if let all { once.resume(all) }
            }
        }
        return outcomes
    }

    // MARK: Administrator side

    /// `pending`: the engine's list for this caller (administrators: everyone's).
    func pendingList(caller: Caller) async -> Reply {
        do throws(InterfaceError) {
            return .pending(try await EngineService(caller: caller, runner: QueuedEngine(enforcement: enforcement)).pending())
        } catch {
            return .error(error.protocolError)
        }
    }

    /// `approve`/`reject`: the engine decides (who may, and what the verdict does, under the
    /// policy as read now); then the requesters waiting for the request are told, and the
    /// administrator is answered.
    func resolve(_ action: PendingAction, approve: Bool, id: Int64, peer: Peer, caller: Caller) async -> Reply {
        let verdict = ApprovalPlan.Verdict(action, approve: approve)
        let service = EngineService(caller: caller, runner: QueuedEngine(enforcement: enforcement),
                                    policy: policies.current())
        let resolving: ApprovalPlan.Resolving
        do throws(InterfaceError) {
            resolving = try await service.resolution(action, verdict: verdict)
        } catch {
            if case .refused(let operation, let reason) = error {
                let subject = (try? ledger.pendingRequest(id: action.pending))?.map(\.subject)
                return refuse(operation, id: id, peer: peer, subject: subject, reason: reason)
            }
            log.error("could not resolve a pending request", ["pending": String(action.pending), "error": error.description])
            return .error(error.protocolError)
        }
        logResolution(resolving, verdict: verdict, by: peer)
        if let resolved = resolving.resolved {
            approvals.resolve(ApprovalWaiters.Outcome(request: resolved.request, results: resolved.results))
        }
        switch resolving.answer(verdict) {
        case .success(let reply):
            return .resolved(reply)
        case .failure(let error):
            // The wire's codes: a uid that names someone else now is `no-such-user`.
            if case .subjectChanged = resolving {
                return .error(ProtocolError(.noSuchUser, context: "$.pending", reason: error.description))
            }
            if case .failed = error { return .error(ProtocolError(.internal, context: verdict.operation, reason: error.description)) }
            return .error(error.protocolError)
        }
    }

    /// The log's line for what a verdict did.
    func logResolution(_ resolving: ApprovalPlan.Resolving, verdict: ApprovalPlan.Verdict, by peer: Peer) {
        switch resolving {
        case .notFound, .alreadyResolved:
            break
        case .subjectChanged(let request, let now):
            log.warning("a pending request's uid names another user now; nothing was decided", [
                "pending": String(request.id), "uid": String(request.subject.uid), "asked_as": request.subject.name,
                "now": now ?? "-"])
        case .done(let request, let results):
            log.notice("request \(verdict.resolution.rawValue)", [
                "pending": String(request.id), "uid": String(request.subject.uid), "by": String(peer.uid),
                "permissions": request.permissions.map(\.rawValue).joined(separator: " "),
                "outcomes": results.map { "\($0.permission.rawValue)=\($0.outcome.rawValue)" }.joined(separator: ",")])
        case .failed(let request, _, let failures):
            log.error("a pending request was resolved, but not every decision was taken", [
                "pending": String(request.id),
                "error": failures.map { "\($0.rawValue): \($1.description)" }.joined(separator: "; ")])
        }
    }
}
