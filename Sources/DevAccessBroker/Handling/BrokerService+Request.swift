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

/// A request's plan from what devaccessd knows of its requester: the engine takes its
/// program and why that program's identity is not trusted, as plain values.
extension RequestPlan {
    init(_ request: AccessRequest, statuses: [PermissionStatus], policy: Policy, user: UserIdentity,
         requester: Requester, location: LocationAsk?, standing: Decisions,
         switchedOff: (Permission) -> PrivacySwitch?, broker: Principal, now: Date) {
        self.init(request, statuses: statuses, policy: policy, user: user, program: requester.program,
                  untrusted: requester.untrusted, location: location, standing: standing, switchedOff: switchedOff,
                  broker: broker, now: now)
    }
}

/// How a prompt ended.
enum PromptEnd: Sendable {
    case answered(PromptAnswer.Answer)
    case timedOut
    case departed(Exchange.Departure)
    /// An answer naming another prompt than the one open.
    case mismatched(answered: Int64, open: Int64)
}

/// What one request is about, for the steps of its conversation.
struct RequestContext: Sendable {
    let request: AccessRequest
    /// Who asks, identified once from the kernel's credentials (`Caller`): the engine's
    /// table judges it, and its standing says whether per-user limits hold it.
    let caller: Caller
    /// The request's id on the wire, in every audit event of the request.
    let wireID: Int64
    let peer: Peer
    /// What really asks (the CLI's parent when the CLI carries the request).
    let requester: Requester
    let user: UserIdentity
    let exchange: Exchange?
    let devices: [PromptDevice]
    /// The process a `once` grant of this request lasts for (`RequestHolder`); nil when it
    /// is gone already.
    let holder: ProcessHolder?
    /// "bash (pid 812)": the holder, for people.
    let holderName: String?
    /// The holder is the shell the CLI was typed in (`RequestHolder.isShell`).
    var holderIsShell = false
    /// With location among the permissions: the level asked and the level a grant records.
    var location: LocationAsk? = nil
    /// The request's audit events not written yet: they are written together before the
    /// broker waits (for a person or the engine) and when the request ends, so a request
    /// answered at once costs one ledger transaction, not one per stage.
    let audit = AuditBuffer()

    var subject: Principal { Principal(uid: user.uid, name: user.name) }
    var reason: String { request.reason ?? "" }

    func devices(for permissions: [Permission]) -> [PromptDevice] {
        devices.filter { permissions.contains($0.permission) }
    }
}

extension BrokerService {
    /// `request`: answers what is decided at once (an earlier decision, the
    /// machine, policy allow/deny), asks the requesting user (ask: a choice, auth_self: the
    /// password) over the connection, queues the rest for an administrator (auth_admin),
    /// records and enforces the decisions, and replies with the statuses afterwards.
    /// A dismissed, interrupted, timed-out or abandoned prompt records no decision.
    func request(_ request: AccessRequest, envelope: RequestEnvelope, peer connected: Peer, exchange: Exchange?) async
        -> Reply
    {
        var asking = connected
        asking.ancestry = ProcFile.ancestry(of: connected.pid)
        let peer = asking
        let caller = caller(of: peer)
        let user = identity(of: peer)
        let (reports, read, policy): ([AdapterReport], DecisionRead, Policy)
        switch await requestInputs(request.permissions) {
        case .success(let inputs): (reports, read, policy) = inputs
        case .failure(let refusal): return refusal.reply
        }
        let before = statuses(for: user, reports: reports, read: read)
        let requester: Requester
        switch await judgedRequester(request, requester: Requester.identify(peer, cliPaths: settings.cliPaths),
                                     id: envelope.id, peer: peer, caller: caller,
                                     subject: Principal(uid: user.uid, name: user.name)) {
        case .success(let judged): requester = judged
        case .failure(let refusal): return refusal.reply
        }
        let context = requestContext(request, requester: requester, policy: policy, reports: reports, id: envelope.id,
                                     peer: peer, caller: caller, user: user, exchange: exchange)
        let standing = Decisions(active: read.grants.filter { $0.subject.uid == user.uid })
        defer { flushAudit(context) }
        // 1. What is answered at once, and who decides the rest.
        let plan = RequestPlan(request, statuses: before, policy: policy, user: user, requester: requester,
                               location: context.location, standing: standing, switchedOff: { read.switchedOff($0) },
                               broker: brokerPrincipal, now: Date())
        // `Program=` rules match only a program whose identity devaccessd trusts.
        let program = requester.policyProgram
        let policies: @Sendable (Permission) -> PolicyDecision = {
            policy.requestDecision(for: $0, user: user, program: program)
        }
        return await decideRequest(plan, context: context, policies: policies, before: before, grants: read.grants,
                                   ledger: ledger, enforcement: enforcement)
    }

    /// The devices, the ledger and the policy as they are now; a policy or ledger that
    /// cannot be read ends the request before anything is asked.
    func requestInputs(_ permissions: [Permission]) async
        -> Result<([AdapterReport], DecisionRead, Policy), ReplyFailure>
    {
        let (reports, read) = await gathered(permissions)
        guard case .loaded(let policy) = read.policy else {
            let problem: String
            if case .unreadable(let text) = read.policy { problem = text } else { problem = "unknown" }
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "request",
                reason: "the policy cannot be read, so nothing was asked or recorded: \(problem); fix the file"))))
        }
        if let problem = read.problem {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "request",
                reason: "the ledger cannot be read, so nothing was asked or recorded: \(problem)"))))
        }
        return .success((reports, read, policy))
    }

    /// What the request is about, for its steps: the process a `once` grant lasts for, the
    /// location level asked and the level the policy lets it have.
    func requestContext(_ request: AccessRequest, requester: Requester, policy: Policy, reports: [AdapterReport],
                        id: Int64, peer: Peer, caller: Caller, user: UserIdentity, exchange: Exchange?) -> RequestContext {
        let asked = RequestHolder.find(peer, requester: requester)
        var context = RequestContext(request: request, caller: caller, wireID: id, peer: peer, requester: requester,
                                     user: user,
                                     exchange: exchange, devices: Self.promptDevices(reports), holder: asked?.holder,
                                     holderName: asked?.name, holderIsShell: asked?.shell ?? false)
        if request.permissions.contains(.location) {
            context.location = LocationAsk(asked: request.accuracy ?? .exact, policy: policy.requestDecision(
                for: .location, user: user, program: requester.policyProgram))
        }
        return context
    }

    /// The request's steps after its plan: per-user limits, the `received` audit, policy
    /// allows and the user's answers (2-4), recording them, the administrator's queue (5)
    /// and the answer (6). The user's slots are held until it is answered.
    func decideRequest(_ plan: RequestPlan, context: RequestContext, policies: @Sendable (Permission) -> PolicyDecision,
                       before: [PermissionStatus], grants: [Grant], ledger: Ledger,
                       enforcement: LiveEnforcer) async -> Reply {
        // Per-user limits, before anything is asked, queued or audited as a request.
        let heldSlots: [UserSlots]
        switch requestSlots(plan, context: context) {
        case .success(let held): heldSlots = held
        case .failure(let refusal): return refusal.reply
        }
        defer { for slots in heldSlots { slots.give(context.peer.accountable) } }
        if let refusal = subordinateGrantsRefusal(plan, context: context, grants: grants) { return refusal }
        if let refusal = adminQueueRefusal(plan, context: context, ledger: ledger) { return refusal }
        if let refusal = admitRequest(plan, context: context, ledger: ledger) { return refusal }
        var plan = plan
        switch await consented(plan, context: context, policies: policies) {
        case .success(let decided): plan = decided
        case .failure(let refusal): return refusal.reply
        }
        if context.holder == nil { plan = plan.withoutOnceAllows() }
        if !plan.grants.isEmpty {
            switch await recordRequest(plan, context: context, enforcement: enforcement) {
            case .success(let results): plan.results = results
            case .failure(let refusal): return refusal.reply
            }
        }
        switch await queuedForAdmin(plan, context: context, ledger: ledger) {
        case .success(let results): plan.results = results
        case .failure(let refusal): return refusal.reply
        }
        return await answer(plan, context: context, before: before)
    }

    /// The user's slots the request takes: an open prompt when it asks the user, a waiting
    /// client when it waits for an administrator; the refusal when the user holds them all
    /// (nothing is held then).
    func requestSlots(_ plan: RequestPlan, context: RequestContext) -> Result<[UserSlots], ReplyFailure> {
        let peer = context.peer
        var heldSlots: [UserSlots] = []
        if plan.asksSomeone {
            guard take(openPrompts, for: peer, unlimited: context.caller.isUnlimited, into: &heldSlots) else {
                return .failure(ReplyFailure(refuse("request", id: context.wireID, peer: peer, subject: context.subject,
                    reason: "\(describe(peer)) has \(openPrompts.limit) open prompts already, the most one user "
                        + "may; answer or end one and try again; nothing was asked or recorded", code: .busy)))
            }
        }
        if context.request.wait && context.exchange != nil && plan.byAction[.authAdmin] != nil {
            guard take(waitingClients, for: peer, unlimited: context.caller.isUnlimited, into: &heldSlots) else {
                let refusal = refuse("request", id: context.wireID, peer: peer, subject: context.subject,
                    reason: "\(describe(peer)) has \(waitingClients.limit) clients waiting for an administrator "
                        + "already, the most one user may; 'devaccess pending' lists your requests; nothing "
                        + "was asked or queued", code: .busy)
                for slots in heldSlots { slots.give(peer.accountable) }
                return .failure(ReplyFailure(refusal))
            }
        }
        return .success(heldSlots)
    }

    /// A subordinate uid: its person's namespaces hold as many grants as they may; nil
    /// when the request may grant.
    func subordinateGrantsRefusal(_ plan: RequestPlan, context: RequestContext, grants: [Grant]) -> Reply? {
        let peer = context.peer
        guard let held = plan.subordinateGrantsOver(grants, caller: context.caller, accountable: peer.accountable,
                                                    limit: settings.maxSubordinateGrantsPerPerson) else { return nil }
        return refuse("request", id: context.wireID, peer: peer, subject: context.subject,
                      reason: "\(describe(peer)) is a uid of a user namespace of uid \(peer.accountable), whose "
                          + "namespaces hold \(held) grants already, the most one person's may; 'devaccess revoke' "
                          + "one first; nothing was asked or recorded", code: .busy)
    }

    /// A new waiting request, when the person has as many waiting as they may: refused.
    /// The queue's cap is counted from the ledger: when it cannot be read, nothing is
    /// queued (an unreadable queue must not read as an empty one).
    func adminQueueRefusal(_ plan: RequestPlan, context: RequestContext, ledger: Ledger) -> Reply? {
        let peer = context.peer
        guard let forAdmin = plan.byAction[.authAdmin], !context.caller.isUnlimited else { return nil }
        let waiting: [PendingRequest]
        do throws(LedgerError) {
            waiting = try ledger.pendingRequests(uid: nil)
        } catch {
            let code: ErrorCode = if case .busy = error { .ledgerBusy } else { .ledgerUnusable }
            log.error("could not read the waiting requests; a request was refused",
                      ["uid": String(peer.uid), "error": error.description])
            return refuse("request", id: context.wireID, peer: peer, subject: context.subject,
                          reason: "the requests waiting for an administrator cannot be read (\(error.description)); "
                              + "nothing was asked or queued", code: code)
        }
        guard let theirs = QueuePlan.overLimit(forAdmin, waiting: waiting, uid: context.user.uid,
                                               accountable: peer.accountable, location: context.location,
                                               limit: settings.maxQueuedPerPerson) else { return nil }
        return refuse("request", id: context.wireID, peer: peer, subject: context.subject,
                      reason: "\(describe(peer)) has \(theirs) requests waiting for an administrator already "
                          + "(with those of the uids of its user namespaces), the most one person may; "
                          + "'devaccess pending' lists them, 'devaccess withdraw ID' takes one back; nothing "
                          + "was asked or queued", code: .busy)
    }

    /// Audits the request as received, within the budget it is charged to; the refusal when
    /// the person made as many changes as they may, or the ledger cannot take the request.
    func admitRequest(_ plan: RequestPlan, context: RequestContext, ledger: Ledger) -> Reply? {
        let (request, peer) = (context.request, context.peer)
        let changesNothing = RequestPlan.changesNothing(plan.byAction, user: context.user, ledger: ledger,
                                                 location: context.location)
        if !changesNothing, let refusal = overChangeBudget("request", id: context.wireID, peer: peer,
                                                          caller: context.caller, subject: context.subject) {
            return refusal
        }
        if !changesNothing { chargeChange(peer, caller: context.caller) }
        var details = requestDetails(request, peer: peer, holder: context.holder)
        if changesNothing, !context.caller.isUnlimited {
            // Answered without a decision, a prompt or a new queued request: an attempt a
            // user can repeat at will, so written within the user's attempt budget only.
            switch refusals.admit(peer.accountable, cost: 2 * request.permissions.count) {
            case .skip: context.audit.suppress()
            case .record(let leftOut): if leftOut > 0 { details[Self.notRecordedKey] = String(leftOut) }
            }
        }
        audit(context, request.permissions, stage: "received", perPermission: plan.received, extra: details)
        guard !plan.byAction.isEmpty else { return nil }
        // Nothing is asked (no password reaches PAM), queued or recorded that the audit
        // trail does not show: a ledger that cannot take the request ends it here.
        do throws(LedgerError) {
            try writeAudit(context)
        } catch {
            let code: ErrorCode = if case .busy = error { .ledgerBusy } else { .ledgerUnusable }
            log.error("could not audit a request; it was refused", ["uid": String(peer.uid), "error": error.description])
            return .error(ProtocolError(code, context: "request",
                reason: "the ledger cannot record this request, so nothing was asked or recorded: "
                    + "\(error.description)"))
        }
        return nil
    }

    /// 3. `ask`, 4. `auth_self`: the user's answers, as decisions to record. Once a prompt
    /// ended without a decision (dismissed, interrupted, timed out, the client gone, wrong
    /// passwords), nothing more is asked of the user, nor waited for.
    func consented(_ plan: RequestPlan, context: RequestContext,
                   policies: (Permission) -> PolicyDecision) async -> Result<RequestPlan, ReplyFailure> {
        var plan = plan
        var passwordGroups: [(group: [Permission], instead: String?)] = []
        if let group = plan.byAction[.ask] {
            switch await askConsent(group, context: context, policies: policies, number: &plan.prompts) {
            case .decided(let decided):
                plan.results.merge(ConsentPlan.unnamed(decided, asked: group)) { $1 }
                plan.grants += decided
            case .undecided(let why):
                plan.ended = why
                plan.leave(group, undecided: why)
            case .broken(let error): return .failure(ReplyFailure(.error(error)))
            case .refused(let reply): return .failure(ReplyFailure(reply))
            case .noChannel(let why):
                // Nobody the requester cannot impersonate can be asked: the password proves a
                // person instead (as polkit does), never the requester's own "yes".
                passwordGroups.append((group, why))
            }
        }
        if let group = plan.byAction[.authSelf] { passwordGroups.append((group, nil)) }
        for (group, instead) in passwordGroups {
            if let ended = plan.ended {
                plan.leave(group, undecided: ended)
                continue
            }
            switch await confirmPassword(group, context: context, policies: policies, number: &plan.prompts,
                                         instead: instead) {
            case .decided(let decided): plan.grants += decided
            case .undecided(let why):
                plan.ended = why
                plan.leave(group, undecided: why)
            case .broken(let error): return .failure(ReplyFailure(.error(error)))
            case .refused(let reply): return .failure(ReplyFailure(reply))
            case .noChannel: break
            }
        }
        return .success(plan)
    }

    /// The plan's decisions recorded and enforced (`record`): the results with each
    /// permission's outcome; an error saying what failed and what held when any failed.
    func recordRequest(_ plan: RequestPlan, context: RequestContext,
                       enforcement: LiveEnforcer) async -> Result<[Permission: RequestResult], ReplyFailure> {
        flushAudit(context)
        let decided: [(plan: GrantPlan, result: Result<Grant, EnforcementError>)]
        do {
            decided = try await record(plan.grants, context: context, enforcement: enforcement)
        } catch {
            log.error("could not record a request's decisions", ["error": error.description, "uid": String(context.user.uid)])
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "request",
                                                              reason: "recording the decision failed: \(error.description)"))))
        }
        let (results, failed) = RequestPlan.recorded(decided, into: plan.results, location: context.location)
        guard !failed.isEmpty else { return .success(results) }
        // The reply says what did hold, permission by permission, beside what failed.
        log.error("could not record a request's decisions", ["error": RequestPlan.describe(failed),
                                                             "uid": String(context.user.uid)])
        return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "request",
            reason: RequestPlan.recordingFailure(failed, permissions: context.request.permissions,
                                                 decided: decided.map(\.plan.permission), results: results)))))
    }

    /// 5. auth_admin: queued in the ledger; optionally wait for the administrator. Not for
    /// a client that left or a person who interrupted the request (Ctrl-C, a cancelled
    /// library task): they asked for nothing more, and nothing waits in their name.
    func queuedForAdmin(_ plan: RequestPlan, context: RequestContext,
                        ledger: Ledger) async -> Result<[Permission: RequestResult], ReplyFailure> {
        var results = plan.results
        guard let group = plan.byAction[.authAdmin] else { return .success(results) }
        let stopped: UndecidedReason? = context.exchange?.departure.map(Self.reason)
            ?? (plan.ended == .interrupted ? .interrupted : nil)
        if let stopped {
            for permission in group { results[permission] = RequestResult.undecided(permission, stopped) }
            return .success(results)
        }
        flushAudit(context)
        do {
            // After a prompt ended unanswered the client is not listening for more: queue, do not wait.
            for (permission, result) in try await queueForAdmin(group, context: context, ledger: ledger,
                                                                mayWait: plan.ended == nil) {
                results[permission] = result
            }
        } catch {
            log.error("could not queue a request", ["error": error.description, "uid": String(context.user.uid)])
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "request",
                reason: "queueing the request for an administrator failed: \(error.description)"))))
        }
        return .success(results)
    }

    /// 6. The answer: the results, and the statuses as they are now, ACLs changed and
    /// ledger written.
    func answer(_ plan: RequestPlan, context: RequestContext, before: [PermissionStatus]) async -> Reply {
        let (request, user, requester) = (context.request, context.user, context.requester)
        let ordered = request.permissions.compactMap { plan.results[$0] }
        let answered = RequestPlan.answeredDetails(ordered)
        audit(context, ordered.map(\.permission).filter { answered[$0] != nil }, stage: "answered", perPermission: answered)
        log.info("request answered", ["uid": String(user.uid), "pid": String(requester.pid),
                                      "program": requester.program ?? "-",
                                      "outcomes": ordered.map { "\($0.permission.rawValue)=\($0.outcome.rawValue)" }
                                          .joined(separator: ",")])
        // Nothing recorded, queued or asked (everything answered at once): the statuses of
        // a moment ago are still the answer; otherwise they are computed again.
        var after = before
        if plan.changedStatuses {
            let (freshReports, freshRead) = await gathered(request.permissions)
            after = statuses(for: user, reports: freshReports, read: freshRead)
        }
        return .decision(DecisionReply(user: user.name, uid: user.uid, results: ordered, permissions: after))
    }

    /// The devices a prompt names, of every permission asked.
    static func promptDevices(_ reports: [AdapterReport]) -> [PromptDevice] {
        reports.flatMap { report in
            report.devices.map { PromptDevice(permission: report.permission, id: $0.id, name: $0.name) }
        }
    }

    // MARK: Answered at once

    // MARK: Prompts

    enum GroupOutcome: Sendable {
        case decided([GrantPlan])
        case undecided(UndecidedReason)
        /// The client broke the conversation (an answer that does not fit the prompt).
        case broken(ProtocolError)
        /// No channel the requester cannot drive (ConsentChannel): `ask` is not put to anyone.
        case noChannel(String)
        /// A per-user limit or the password back-off ends the request with this reply (already
        /// audited as `refused`).
        case refused(Reply)
    }

    /// Takes one of the peer's `slots` into `held`; false when the peer holds them all.
    /// Root and administrators (`unlimited`, `Caller.isUnlimited`) are not limited.
    func take(_ slots: UserSlots, for peer: Peer, unlimited: Bool, into held: inout [UserSlots]) -> Bool {
        if slots.take(peer.accountable) {
            held.append(slots)
            return true
        }
        return unlimited
    }

    /// `ask`: one prompt for the whole group; the answer decides every permission in it.
    func askConsent(_ group: [Permission], context: RequestContext, policies: (Permission) -> PolicyDecision,
                    number: inout Int64) async -> GroupOutcome {
        let choices = ConsentPlan.askChoices(group.map(policies), scope: context.request.scope,
                                             holder: context.holderName, shell: context.holderIsShell,
                                             now: Date().timeIntervalSince1970)
        number += 1
        flushAudit(context)
        var outcome = ["kind": "ask", "prompt": String(number)]
        defer { audit(context, group, stage: "prompt", extra: outcome) }
        let terminal: ConsentChannel.Terminal
        switch consentChannel(context.peer, context.user) {
        case .failure(let unavailable):
            outcome["outcome"] = "no-channel"
            outcome["channel_problem"] = unavailable.reason
            return .noChannel(unavailable.reason)
        case .success(let found):
            terminal = found
        }
        outcome["channel"] = "\(terminal.path) (\(terminal.source))"
        let text = RequestText.question(group, term: nil, user: context.user, peer: context.peer,
                                        requester: context.requester, devices: context.devices(for: group),
                                        reason: context.request.reason, location: context.location)
        let end = await askOnTerminal(terminal, text: text, question: Self.question(group, choices, context),
                                      owner: context.user.uid, requester: context.peer.pid, exchange: context.exchange)
        let (words, answered) = consentAnswered(end, on: terminal, context: context, policies: policies)
        outcome.merge(words) { $1 }
        return answered
    }

    /// What the login terminal's answer comes to: what the `prompt` audit event records,
    /// and the group's outcome.
    func consentAnswered(_ end: TerminalPrompt.End, on terminal: ConsentChannel.Terminal, context: RequestContext,
                         policies: (Permission) -> PolicyDecision) -> (audit: [String: String], outcome: GroupOutcome) {
        switch end {
        case .failed(let problem):
            return (["outcome": "no-channel", "channel_problem": problem],
                    .noChannel("the login terminal could not be used: \(problem)"))
        case .chose(let answer):
            // Exactly what was typed: an offered choice, for the permissions named (all or some of the group).
            var words = ["outcome": answer.choice.choice.word,
                         "named": answer.permissions.map(\.rawValue).joined(separator: ",")]
            if let level = answer.level { words["accuracy_chosen"] = level.rawValue }
            log.info("answered on the login terminal", ["uid": String(context.user.uid), "tty": terminal.path,
                                                         "source": terminal.source, "answer": answer.choice.choice.word,
                                                         "named": words["named"] ?? ""])
            return (words, .decided(ConsentPlan.decided(answer.permissions, term: answer.choice.term, level: answer.level,
                                                        policies: policies, subject: context.subject)))
        case .dismissed:
            return (["outcome": "cancel:dismissed"], .undecided(.dismissed))
        case .endOfInput:
            return (["outcome": "cancel:end-of-input"], .undecided(.endOfInput))
        case .timedOut:
            return (["outcome": "timeout"], .undecided(.timeout))
        case .cancelled:
            let departure = context.exchange?.departure ?? .closed
            return (["outcome": "client-\(departure.word)"], .undecided(Self.reason(departure)))
        }
    }

    /// What the terminal question about `group` takes as an answer: `choices`; location may be
    /// allowed coarser than asked; a run's grants are bound to its program, so the answer
    /// names the program's file too (`ConsentPlan`).
    static func question(_ group: [Permission], _ choices: [PromptChoice],
                         _ context: RequestContext) -> ConsentAnswer.Question {
        ConsentAnswer.Question(permissions: group, choices: choices,
                               levels: ConsentPlan.coarserLevels(group, granted: context.location?.granted),
                               program: ConsentPlan.boundProgram(context.requester.program,
                                                                 startedByRun: context.requester.startedByRun))
    }

    /// Asks on the login terminal; the requester's leaving withdraws the question. An
    /// answer the requester sends on its connection meanwhile is not read: the event loop
    /// keeps it until the request ends, and then refuses it.
    func askOnTerminal(_ terminal: ConsentChannel.Terminal, text: String, question: ConsentAnswer.Question,
                       owner: UInt32, requester: Int32, exchange: Exchange?) async -> TerminalPrompt.End {
        let prompt = TerminalPrompt(terminal: terminal, owner: owner, requester: requester)
        exchange?.listen { event in
            if case .departed = event { prompt.cancel() }
        }
        if exchange?.departure != nil { return .cancelled }
        return await prompt.ask(text, question: question, timeout: settings.promptTimeout)
    }

    static func mismatch(_ answered: Int64, _ open: Int64) -> ProtocolError {
        ProtocolError(.badMessage, context: "$.prompt",
                      reason: "the answer is for prompt \(answered), but prompt \(open) is open; nothing was recorded")
    }

    /// `auth_self`: the user's password through PAM, up to `passwordAttempts` tries.
    func confirmPassword(_ group: [Permission], context: RequestContext, policies: (Permission) -> PolicyDecision,
                         number: inout Int64, instead: String? = nil) async -> GroupOutcome {
        let (terms, termText) = ConsentPlan.passwordTerms(group, scope: context.request.scope,
                                                          holder: context.holderName, shell: context.holderIsShell,
                                                          policies: policies)
        let attempts = Int64(max(1, settings.passwordAttempts))
        for attempt in 1...attempts {
            // After wrong passwords (from any request of this user) the next check waits;
            // a wait longer than an answer may wait is refused before anything is asked.
            let backoff = passwords.waiting(context.user.uid)
            if backoff.wait > passwords.waitLimit {
                return .refused(refuseBackoff(context, wait: backoff.wait, failures: backoff.failures))
            }
            number += 1
            let question = RequestText.question(group, term: termText, user: context.user, peer: context.peer,
                                                requester: context.requester, devices: context.devices(for: group),
                                                reason: context.request.reason, location: context.location)
            let text = ConsentPlan.passwordText(question, user: context.user.name, term: termText, instead: instead,
                                                attempt: attempt, attempts: attempts, backoff: backoff)
            let prompt = PromptMessage(
                prompt: number, kind: .password, permissions: group, user: context.user.name,
                program: context.requester.program, reason: context.request.reason, devices: context.devices(for: group),
                text: text, choices: [], timeout: settings.promptTimeoutSeconds, attempt: attempt, attempts: attempts)
            flushAudit(context)
            let end = await ask(prompt, on: context.exchange)
            let (words, outcome) = await passwordAnswered(end, group: group, terms: terms, context: context,
                                                          prompt: number)
            let asked = ["kind": "password", "prompt": String(number), "attempt": String(attempt)]
            audit(context, group, stage: "prompt", extra: asked.merging(words) { $1 })
            if let outcome { return outcome }
        }
        return .undecided(.wrongPassword)
    }

    /// What a password prompt's end comes to: what its `prompt` audit event records, and the
    /// group's outcome (nil: a wrong password, ask again).
    func passwordAnswered(_ end: PromptEnd, group: [Permission], terms: [ResolvedTerm], context: RequestContext,
                          prompt number: Int64) async -> (audit: [String: String], outcome: GroupOutcome?) {
        switch end {
        case .answered(.password(let password)):
            return await passwordChecked(password, group: group, terms: terms, context: context)
        case .answered(.cancel(let why)):
            return (["outcome": "cancel:\(why.rawValue)"], .undecided(UndecidedReason(why)))
        case .answered(.choice):
            return (["outcome": "invalid"], .broken(ProtocolError(.badMessage, context: "$.answer",
                reason: "prompt \(number) asks for a password, not a choice; nothing was recorded")))
        case .timedOut:
            return (["outcome": "timeout"], .undecided(.timeout))
        case .departed(let departure):
            return (["outcome": "client-\(departure.word)"], .undecided(Self.reason(departure)))
        case .mismatched(let answered, let open):
            return (["outcome": "invalid"], .broken(Self.mismatch(answered, open)))
        }
    }

    /// The password checked through PAM (`passwords`: one check at a time per user, with
    /// its back-off): accepted, the group is allowed for its terms, decided by the user.
    func passwordChecked(_ password: String, group: [Permission], terms: [ResolvedTerm],
                         context: RequestContext) async -> (audit: [String: String], outcome: GroupOutcome?) {
        let exchange = context.exchange
        let checked = await passwords.check(uid: context.user.uid, user: context.user.name, password: password,
                                            wanted: { exchange?.departure == nil })
        let words = ["outcome": PasswordChecks.word(checked)]
        switch checked {
        case .accepted:
            return (words, .decided(ConsentPlan.passwordAccepted(group, terms: terms, subject: context.subject)))
        case .rejected:
            return (words, nil)
        case .failed(let problem):
            log.error("PAM could not check a password", ["service": settings.pamService, "error": problem,
                                                         "uid": String(context.user.uid)])
            return (words.merging(["problem": problem]) { $1 }, .undecided(.authenticationFailed))
        case .backingOff(let wait, let failures):
            return (words, .refused(refuseBackoff(context, wait: wait, failures: failures)))
        case .busy(let why):
            if let departure = context.exchange?.departure { return (words, .undecided(Self.reason(departure))) }
            return (words, .refused(refuse("request", id: context.wireID, peer: context.peer, subject: context.subject,
                                           reason: "the password was not checked: \(why); try again in a few seconds; "
                                               + "nothing was recorded", code: .busy)))
        }
    }

    /// The reply to a password that may not be checked yet, audited through the throttle.
    func refuseBackoff(_ context: RequestContext, wait: Duration, failures: Int) -> Reply {
        let seconds = PasswordChecks.seconds(wait)
        return refuse("request", id: context.wireID, peer: context.peer, subject: context.subject,
                      reason: "\(failures) wrong password\(failures == 1 ? "" : "s") for \(context.user.name) in a row: "
                          + "devaccessd checks the next one no sooner than in \(seconds) s; try again in \(seconds) s; "
                          + "nothing was recorded", code: .busy)
    }

    static func reason(_ departure: Exchange.Departure) -> UndecidedReason {
        departure == .shutdown ? .shutdown : .disconnected
    }

    /// Sends `prompt` and waits, holding no thread, for its answer, the client's
    /// departure, or the prompt timeout, whichever comes first.
    func ask(_ prompt: PromptMessage, on exchange: Exchange?) async -> PromptEnd {
        guard let exchange else { return .departed(.closed) }
        let timeout = settings.promptTimeout
        return await withCheckedContinuation { continuation in
            let once = ResumeOnce(continuation)
            let timer = Task {
                try? await Task.sleep(for: timeout)
                if !Task.isCancelled { once.resume(.timedOut) }
            }
            once.whenResumed { timer.cancel() }
            exchange.listen { event in
                switch event {
                case .answer(let answer) where answer.prompt == prompt.prompt:
                    // Enter alone is no answer: never a wrong password for PAM, pam_faillock
                    // or the back-off (issue 27 item 10).
                    once.resume(.answered(answer.answer == .password("") ? .cancel(.dismissed) : answer.answer))
                case .answer(let answer):
                    // An answer to another prompt cannot be taken for this one.
                    once.resume(.mismatched(answered: answer.prompt, open: prompt.prompt))
                case .departed(let departure):
                    once.resume(.departed(departure))
                }
            }
            exchange.send(.prompt(prompt), awaitingAnswer: true)
        }
    }

    // MARK: Recording

    /// Writes the decisions (ledger first) and applies them (ACLs), as one engine operation,
    /// through the engine's one decide path (`Enforcer.decide`): an allow first ends the
    /// user's standing allows (so `for 1h` after `always` really ends), a denial is written
    /// first and then ends them, a denial the ledger cannot take still ends access; each
    /// grant keeps who decided and how (consent, auth_self, policy). Each plan gets its own
    /// result: an allow the policy forbids by now fails alone, the denials beside it hold.
    func record(_ plans: [GrantPlan], context: RequestContext,
                enforcement: LiveEnforcer) async throws(DecisionEnforcementFailure)
        -> [(plan: GrantPlan, result: Result<Grant, EnforcementError>)] {
        let subject = context.subject
        let reason = context.reason
        let holder = context.holder
        let level = context.location?.granted
        return try await enforcement.perform("request") { (enforcer) throws(EnforcementError)
            -> ([(plan: GrantPlan, result: Result<Grant, EnforcementError>)], EnforcementReport) in
            let now = enforcer.clock()
            let outcomes = enforcer.decide(plans.map { plan in
                Enforcer.DecisionRequest(
                    subject: subject, permission: plan.permission, decision: plan.decision, term: plan.term, from: now,
                    holder: holder, reason: reason,
                    // Every allow of location records its level, exact included, so the row says what was decided.
                    accuracy: plan.permission == .location && plan.decision == .allow ? plan.accuracy ?? level ?? .exact : nil,
                    decidedBy: plan.decidedBy, method: plan.method)
            })
            let report = outcomes.compactMap { try? $0.get().report }.last ?? EnforcementReport()
            return (zip(plans, outcomes).map { ($0, $1.map(\.grant)) }, report)
        }
    }

    // MARK: Audit

    func requestDetails(_ request: AccessRequest, peer: Peer, holder: ProcessHolder?) -> [String: String] {
        var details: [String: String] = ["wait": request.wait ? "true" : "false"]
        if let accuracy = request.accuracy { details["accuracy_asked"] = accuracy.rawValue }
        // The process a `once` grant of this request would last for.
        if let holder { details["holder_pid"] = String(holder.pid) }
        // What really asked: the CLI is rarely it.
        if !peer.ancestry.isEmpty { details["started_by"] = peer.ancestry.joined(separator: " <- ") }
        details.merge(GrantTerm.auditDetails(request.scope)) { $1 }
        return details
    }

    /// One `request` event per permission (so `audit --permission` finds them), kept for
    /// the next `flushAudit`.
    func audit(_ context: RequestContext, _ permissions: [Permission], stage: String,
               perPermission: [Permission: [String: String]] = [:], extra: [String: String] = [:]) {
        guard !permissions.isEmpty else { return }
        var base = ["stage": stage, "request_id": String(context.wireID), "pid": String(context.peer.pid)]
        if !context.reason.isEmpty { base["reason"] = context.reason }
        if let problem = context.peer.programProblem { base["program_problem"] = problem }
        // The program that asked is `program`; the CLI that carried the request is named here.
        if let cli = context.requester.cli {
            base["cli"] = cli.path
            base["cli_pid"] = String(cli.pid)
            base["requester_pid"] = String(context.requester.pid)
            if context.requester.isShell { base["requester_is_shell"] = "true" }
        }
        if let untrusted = context.requester.untrusted { base["program_trust"] = untrusted }
        base.merge(extra) { _, new in new }
        let subject = context.subject
        let events = permissions.map { permission in
            AuditEvent(type: .request, actor: subject, subject: subject, permission: permission,
                       program: context.requester.program,
                       details: base.merging(perPermission[permission] ?? [:]) { _, new in new })
        }
        context.audit.add(events)
    }

    /// Writes the request's kept events; a ledger that cannot be written is logged, not
    /// fatal to the answer (the request was audited before anything was asked).
    func flushAudit(_ context: RequestContext) {
        do throws(LedgerError) {
            try writeAudit(context)
        } catch {
            log.error("could not audit a request", ["error": error.description])
        }
    }

    /// Writes the request's kept events in one transaction, or throws why not (the events
    /// are dropped either way: a later flush does not repeat them).
    func writeAudit(_ context: RequestContext) throws(LedgerError) {
        let events = context.audit.take()
        guard !events.isEmpty else { return }
        _ = try ledger.append(contentsOf: events)
    }
}

/// Audit events of one request, kept until they are written together.
final class AuditBuffer: Sendable {
    private let state = Mutex<(events: [AuditEvent], suppressed: Bool)>(([], false))

    func add(_ more: [AuditEvent]) {
        state.withLock { state in
            if !state.suppressed { state.events += more }
        }
    }

    /// The request is over the user's attempt budget: nothing of it is written.
    func suppress() {
        state.withLock { $0 = ([], true) }
    }

    func take() -> [AuditEvent] {
        state.withLock { state in
            defer { state.events = [] }
            return state.events
        }
    }
}

/// Resumes a continuation once, whichever of several events comes first.
final class ResumeOnce<Value: Sendable>: Sendable {
    private let state: Mutex<(continuation: CheckedContinuation<Value, Never>?, after: [@Sendable () -> Void])>

    init(_ continuation: CheckedContinuation<Value, Never>) {
        state = Mutex((continuation, []))
    }

    func resume(_ value: Value) {
        let (continuation, after) = state.withLock { state -> (CheckedContinuation<Value, Never>?, [@Sendable () -> Void]) in
            let taken = (state.continuation, state.after)
            state.continuation = nil
            state.after = []
            return taken
        }
        guard let continuation else { return }
        for action in after { action() }
        continuation.resume(returning: value)
    }

    /// Runs `action` when the continuation is resumed (at once if it already was).
    func whenResumed(_ action: @escaping @Sendable () -> Void) {
        let pending = state.withLock { state -> Bool in
            guard state.continuation != nil else { return false }
            state.after.append(action)
            return true
        }
        if !pending { action() }
    }
}
