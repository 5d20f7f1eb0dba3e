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
        let waiting = try ledger.pendingRequests(uid: context.user.uid)
        var pendingOf: [Permission: Int64] = [:]
        var fresh: Set<Int64> = []
        for permission in group {
            if let earlier = waiting.first(where: { RequestPlan.covers($0, permission, location: context.location) }) {
                pendingOf[permission] = earlier.id
            }
        }
        let uncovered = group.filter { pendingOf[$0] == nil }
        if !uncovered.isEmpty {
            // Only a trusted program is kept: the approval matches `Program=` rules on it, and
            // `pending` shows it to the admin as what asked (an untrusted one is in the audit).
            // The level as asked: the cap is the policy's at approval, which applies it then.
            let queued = try ledger.queueRequest(NewPendingRequest(
                subject: context.subject, program: context.requester.policyProgram, permissions: uncovered,
                scope: context.request.scope, reason: context.reason, holder: context.holder,
                accuracy: uncovered.contains(.location) ? context.location?.asked : nil))
            fresh.insert(queued.id)
            for permission in uncovered { pendingOf[permission] = queued.id }
            log.notice("request queued for an administrator", [
                "pending": String(queued.id), "uid": String(context.user.uid),
                "permissions": uncovered.map(\.rawValue).joined(separator: " ")])
        }
        let ids = Set(pendingOf.values).sorted()
        let wait = mayWait && context.request.wait && context.exchange != nil && context.exchange?.departure == nil
        for id in ids {
            context.exchange?.send(.queued(QueuedReply(pending: id, permissions: group.filter { pendingOf[$0] == id },
                                                       new: fresh.contains(id), waiting: wait)), awaitingAnswer: false)
        }
        var outcomes: [Int64: ApprovalWaiters.Outcome] = [:]
        if wait, let exchange = context.exchange {
            outcomes = await awaitResolution(of: Set(ids), exchange: exchange, ledger: ledger)
        }
        return group.map { permission in
            guard let id = pendingOf[permission] else {
                return (permission, RequestResult.undecided(permission, .disconnected))
            }
            if let outcome = outcomes[id] {
                if let result = outcome.results.first(where: { $0.permission == permission }) { return (permission, result) }
                // Resolved while this request was being registered: the ledger says how.
                let by = outcome.request.resolvedBy.map { " by \($0.name)" } ?? ""
                switch outcome.request.resolution {
                case .approved?:
                    return (permission, RequestResult(permission: permission, outcome: .granted, how: .admin,
                                                      message: "request \(id) was approved\(by)"))
                case .rejected?:
                    return (permission, RequestResult(permission: permission, outcome: .denied, how: .admin,
                                                      message: "request \(id) was rejected\(by)"))
                case .declined?:
                    return (permission, Self.declined(permission, id: id, by: outcome.request.resolvedBy))
                case .withdrawn?, nil:
                    return (permission, RequestResult.undecided(permission, .dismissed))
                }
            }
            let earlier = fresh.contains(id) ? "" : " (an earlier request of yours, still waiting)"
            let advice = wait ? "you stopped waiting; it stays queued"
                : "run 'devaccess request \(permission.rawValue) --wait' to wait for the answer"
            return (permission, RequestResult(permission: permission, outcome: .pending, pending: id,
                                              message: "waiting for an administrator to approve request \(id)\(earlier); "
                                                  + advice))
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

    /// Admins see every waiting request; anyone else sees their own.
    func pendingList(id: Int64, peer: Peer) -> Reply {
        let uid: UInt32? = administers(peer) ? nil : peer.uid
        do {
            return .pending(PendingListReply(requests: try ledger.pendingRequests(uid: uid).map(Self.item)))
        } catch {
            return .error(ProtocolError(.internal, context: "pending", reason: error.description))
        }
    }

    static func item(_ request: PendingRequest) -> PendingItem {
        PendingItem(pending: request.id, user: request.subject.name, uid: request.subject.uid,
                           program: request.program, permissions: request.permissions,
                           reason: request.reason.isEmpty ? nil : request.reason, term: request.scope,
                           accuracy: request.locationLevel, created: ISOTime.format(request.created))
    }

    /// What approving or rejecting found and did.
    enum Resolving: Sendable {
        case notFound
        case alreadyResolved(PendingRequest)
        /// The request's uid names another user now (`now`; nil: none): deleted, and its uid
        /// handed to someone who never asked (useradd reuses the highest uid). Nothing decided.
        case subjectChanged(PendingRequest, now: String?)
        case done(PendingRequest, [RequestResult])
        /// Resolved, but the engine failed for some permissions (not the policy's refusal,
        /// which is `restricted`): what held, and what failed.
        case failed(PendingRequest, held: [RequestResult], failures: [(Permission, EnforcementError)])
    }

    /// What a requester is told of a request an administrator declined: no decision.
    static func declined(_ permission: Permission, id: Int64, by: Principal?) -> RequestResult {
        RequestResult(permission: permission, outcome: .undecided, why: .dismissed,
                      message: "request \(id) was declined" + (by.map { " by \($0.name)" } ?? "")
                          + "; no decision was recorded, a new request is queued again")
    }

    /// `approve`: grants each permission as an administrator's decision (how=admin), with
    /// the term the administrator chose, else the one the requester asked for, under the
    /// policy that applies now (a permission the policy now forbids is not granted).
    /// `reject` with `deny`: records a denial of each, which stays until `devaccess reset`;
    /// without: declines the request, recording no decision. Then tells requesters who wait.
    func resolve(_ action: PendingAction, approve: Bool, id: Int64, peer: Peer) async -> Reply {
        let operation = approve ? "approve" : "reject"
        guard administers(peer) else {
            let subject = (try? ledger.pendingRequest(id: action.pending))?.map(\.subject)
            return refuse(operation, id: id, peer: peer, subject: subject,
                          reason: "\(describe(peer)) may not \(operation) request \(action.pending): only root "
                              + "and members of group '\(adminGroup)' may")
        }
        let policy: Policy
        switch policies.current() {
        case .loaded(let loaded): policy = loaded
        case .unreadable(let problem):
            return .error(ProtocolError(.internal, context: operation,
                reason: "the policy cannot be read, so nothing was \(approve ? "approved" : "rejected"): \(problem)"))
        }
        let admin = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        let note = action.reason ?? ""
        let verdict: Verdict = approve ? .approve(action.scope) : action.deny ? .deny : .decline
        let resolving: Resolving
        do {
            resolving = try await enforcement.perform(operation) {
                (enforcer) throws(EnforcementError) -> (Resolving, EnforcementReport) in
                try Self.resolve(action.pending, verdict: verdict, note: note, admin: admin, policy: policy,
                                 enforcer: enforcer)
            }
        } catch {
            log.error("could not resolve a pending request", ["pending": String(action.pending), "error": error.description])
            return .error(ProtocolError(.internal, context: operation, reason: error.description))
        }
        switch resolving {
        case .notFound:
            return .error(ProtocolError(.noSuchRequest, context: "$.pending",
                reason: "there is no request \(action.pending); 'devaccess pending' lists those waiting"))
        case .alreadyResolved(let request):
            var text = "request \(request.id) was already \(request.resolution?.rawValue ?? "resolved")"
            if let by = request.resolvedBy { text += " by \(by.name)" }
            if let when = request.resolved { text += " at \(ISOTime.format(when))" }
            return .error(ProtocolError(.noSuchRequest, context: "$.pending", reason: text))
        case .subjectChanged(let request, let now):
            let uid = request.subject.uid
            let who = now.map { "is \($0)'s now" } ?? "names no user now"
            log.warning("a pending request's uid names another user now; nothing was decided", [
                "pending": String(request.id), "uid": String(uid), "asked_as": request.subject.name,
                "now": now ?? "-"])
            return .error(ProtocolError(.noSuchUser, context: "$.pending",
                reason: "request \(request.id) was made by \(request.subject.name) (uid \(uid)), and uid \(uid) \(who): "
                    + "deciding it would decide for someone who did not ask; nothing was decided; decline it with "
                    + "'devaccess reject \(request.id)'"))
        case .done(let request, let results):
            let resolution: Resolution = verdict.resolution
            log.notice("request \(resolution.rawValue)", [
                "pending": String(request.id), "uid": String(request.subject.uid), "by": String(peer.uid),
                "permissions": request.permissions.map(\.rawValue).joined(separator: " "),
                "outcomes": results.map { "\($0.permission.rawValue)=\($0.outcome.rawValue)" }.joined(separator: ",")])
            approvals.resolve(ApprovalWaiters.Outcome(request: request, results: results))
            return .resolved(ResolvedReply(pending: request.id, resolution: resolution,
                                           user: request.subject.name, uid: request.subject.uid, results: results))
        case .failed(let request, let held, let failures):
            // The request is resolved in the ledger: a requester waiting hears what held; for a
            // permission that failed it hears the request's resolution (`queueForAdmin`), and
            // its decision's statuses, computed afresh, say where it stands. The administrator
            // gets an error that says, permission by permission, what failed and what held.
            let text = failures.map { "\($0.rawValue): \($1.description)" }
            log.error("a pending request was resolved, but not every decision was taken", [
                "pending": String(request.id), "error": text.joined(separator: "; ")])
            approvals.resolve(ApprovalWaiters.Outcome(request: request, results: held))
            let rest = held.map { "\($0.permission.rawValue): \($0.outcome.rawValue), \($0.message)" }
            return .error(ProtocolError(.internal, context: operation,
                reason: "request \(request.id) was \(verdict.resolution.rawValue), but the decision failed for "
                    + text.joined(separator: "; ") + (rest.isEmpty ? "" : "; the rest: " + rest.joined(separator: "; "))))
        }
    }

    /// What an administrator decided about a pending request.
    enum Verdict: Sendable, Hashable {
        /// The term chosen (nil: as requested).
        case approve(GrantTerm?)
        case deny
        case decline

        var resolution: Resolution {
            switch self {
            case .approve: return .approved
            case .deny: return .rejected
            case .decline: return .declined
            }
        }
    }

    /// The engine operation behind `approve`/`reject`, on the enforcement queue: the
    /// decisions and the request's resolution written in one transaction
    /// (`Enforcer.resolve`, as the administrator), then applied. A crash leaves the request
    /// waiting with no decision, or resolved with all of them; a permission the engine
    /// refuses (the policy forbids it by now) is `restricted` alone.
    static func resolve(_ id: Int64, verdict: Verdict, note: String, admin: Principal, policy: Policy,
                        enforcer engine: Enforcer) throws(EnforcementError) -> (Resolving, EnforcementReport) {
        let approve: Bool
        var chosen: GrantTerm?
        switch verdict {
        case .approve(let scope):
            approve = true
            chosen = scope
        case .deny: approve = false
        case .decline:
            return try decline(id, note: note, admin: admin, ledger: engine.ledger)
        }
        let (request, user): (PendingRequest, UserIdentity)
        switch try decidable(id, engine: engine) {
        case .decidable(let found, let named): (request, user) = (found, named)
        case .answered(let resolving): return (resolving, EnforcementReport())
        }
        let enforcer = engine.acting(as: admin)
        let switches: [PrivacySwitch]
        do {
            switches = try engine.ledger.switches()
        } catch {
            throw .ledger(error)
        }
        let reason = "\(approve ? "approved" : "rejected") request \(request.id)" + (note.isEmpty ? "" : ": \(note)")
        let plan = ApprovalPlan(request, approve: approve, chosen: chosen, policy: policy, user: user,
                                switches: switches, reason: reason, clock: { enforcer.clock() })
        // Each decision has its own result (`Enforcer.resolve`): one the engine refuses fails
        // alone, and the request is resolved with the rest.
        let (resolved, decided) = try enforcer.resolve(id, as: approve ? .approved : .rejected,
                                                       decisions: plan.decisions, note: note)
        let (results, failed) = plan.results(decided, permissions: request.permissions, approve: approve)
        let report = decided.compactMap { try? $0.get().report }.last ?? EnforcementReport()
        guard failed.isEmpty else { return (.failed(resolved, held: results, failures: failed), report) }
        return (.done(resolved, results), report)
    }

    /// A pending request found, with the user its uid names now; else what the
    /// administrator is answered instead.
    enum Decidable {
        case decidable(PendingRequest, UserIdentity)
        case answered(Resolving)
    }

    /// The waiting request `id` and its user. The administrator was shown the name the
    /// request recorded; a uid that names another user now (a subordinate uid, with no
    /// passwd entry, is named by its number) is not decided for: approving would grant
    /// whoever has the uid now.
    static func decidable(_ id: Int64, engine: Enforcer) throws(EnforcementError) -> Decidable {
        let found: PendingRequest?
        do {
            found = try engine.ledger.pendingRequest(id: id)
        } catch {
            throw .ledger(error)
        }
        guard let request = found else { return .answered(.notFound) }
        guard request.isWaiting else { return .answered(.alreadyResolved(request)) }
        let current = engine.identities(request.subject.uid)
        guard (current?.name ?? String(request.subject.uid)) == request.subject.name else {
            return .answered(.subjectChanged(request, now: current?.name))
        }
        return .decidable(request, current
            ?? UserIdentity(uid: request.subject.uid, name: request.subject.name, primaryGID: UInt32.max, groups: []))
    }

    /// `reject` without `deny`: the request ends as declined; nothing is decided.
    private static func decline(_ id: Int64, note: String, admin: Principal,
                                ledger: Ledger) throws(EnforcementError) -> (Resolving, EnforcementReport) {
        do {
            guard let request = try ledger.pendingRequest(id: id) else { return (.notFound, EnforcementReport()) }
            guard request.isWaiting else { return (.alreadyResolved(request), EnforcementReport()) }
            let resolved = try ledger.resolvePendingRequest(id: id, as: .declined, by: admin, note: note)
            return (.done(resolved, resolved.permissions.map { declined($0, id: id, by: admin) }), EnforcementReport())
        } catch {
            throw .ledger(error)
        }
    }
}
