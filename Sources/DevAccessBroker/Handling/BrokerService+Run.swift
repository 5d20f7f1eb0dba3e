import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessEngine
import DevAccessLaunch
import DevAccessInterface

/// `run`: devaccessd decides for the program (user + program path), starts it as
/// the peer with one group id of its own, gives that id an ACL entry on the granted devices'
/// nodes, relays the client's signals, and when the program exits ends the run: the entry
/// goes, and a `once` grant with it. A descendant that outlives the program keeps a group id
/// that no node names any more (RunGroups).
extension BrokerService {
    /// How many programs one person's runs may be opening at once.
    static let openingsPerPerson = 4

    /// Opens the run's program as the caller, with the groups the caller's process has (the
    /// kernel's), which are the ones the program gets but the run's own; on a thread of its
    /// own, and at most `openingsPerPerson` at once per person. The opening child is killed
    /// after 2 s but reaped before devaccessd goes on, and a lookup on the caller's FUSE mount
    /// whose server read the request and never answers outlives SIGKILL (the kernel waits the
    /// request out): on a request handler thread, a few such runs stopped devaccessd
    /// answering anyone. nil: the person has that many openings still going.
    func openProgram(_ order: RunOrder, peer: Peer) async -> Result<RunProgram, RunProgram.Problem>? {
        let person = peer.accountable
        guard programOpenings.take(person) else { return nil }
        let openings = programOpenings
        let (path, directory, uid, gid) = (order.program, order.directory, peer.uid, peer.gid)
        let groups = Self.callerGroups(peer)
        return await DetachedThread.run(name: "devaccessd run open") {
            defer { openings.give(person) }
            return RunProgram.open(path, directory: directory, uid: uid, gid: gid, groups: groups)
        }
    }

    func run(_ order: RunOrder, envelope: RequestEnvelope, peer: Peer, exchange: Exchange?) async -> Reply {
        // Owned here and kept open until the run ends (they close when this returns), on
        // purpose: while devaccessd (root) holds the caller's stdin/stdout/stderr, a socket the
        // caller passed as one of them never counts as the run's alone at the gpsd endpoint
        // (SocketHolders), even if the caller hides its own copy from /proc.
        // RunLocationHostileTests.aSocketHiddenFromTheScanIsNotServedAtTheRunsLevel.
        let streams: FileDescriptors = if let exchange { exchange.takeDescriptors() } else { FileDescriptors() }
        guard let exchange, streams.count == RunOrder.descriptorCount else {
            return .error(ProtocolError(.badMessage, context: "run",
                reason: "'run' needs its conversation and the caller's stdin, stdout and stderr; nothing was run"))
        }
        let caller = caller(of: peer)
        if let refusal = judgedRun(order, id: envelope.id, peer: peer, caller: caller) { return refusal }
        let user = identity(of: peer)
        let program: RunProgram
        switch await openedProgram(order, id: envelope.id, peer: peer, subject: Principal(uid: user.uid, name: user.name)) {
        case .success(let opened): program = opened
        case .failure(let refusal): return refusal.reply
        }
        defer { program.close() }
        var order = order
        let declared = order.permissions.isEmpty ? declaredPermissions(of: program.path) : nil
        switch RunPlan.permissions(order.permissions, declared: declared, program: program.path) {
        case .success(let permissions): order.permissions = permissions
        case .failure(let error): return .error(error)
        }
        return await decideRun(order, program: program, streams: streams.rawValues, user: user, id: envelope.id,
                               peer: peer, caller: caller,
                               exchange: exchange, enforcement: enforcement)
    }

    /// The run's program, opened as the caller (`openProgram`), or the refusal to reply with.
    func openedProgram(_ order: RunOrder, id: Int64, peer: Peer,
                       subject: Principal) async -> Result<RunProgram, ReplyFailure> {
        switch await openProgram(order, peer: peer) {
        case .success(let opened)?: return .success(opened)
        case .failure(let problem)?:
            return .failure(ReplyFailure(refuse("run", id: id, peer: peer, subject: subject, reason: problem.description,
                                                code: .badMessage)))
        case nil:
            return .failure(ReplyFailure(refuse("run", id: id, peer: peer, subject: subject,
                reason: "\(Self.openingsPerPerson) programs you named are still being looked up (their file "
                    + "system does not answer); try again when it does; nothing was run", code: .busy)))
        }
    }

    /// 1. The decision: the user's own access, a standing decision for this program, policy, a
    /// person (`RunPlan`); a run every permission is given starts (`startRun`).
    func decideRun(_ order: RunOrder, program: RunProgram, streams: [CInt], user: UserIdentity, id: Int64, peer: Peer,
                   caller: Caller,
                   exchange: Exchange, enforcement: LiveEnforcer) async -> Reply {
        let (reports, read, policy): ([AdapterReport], DecisionRead, Policy)
        switch await runInputs(order.permissions) {
        case .success(let inputs): (reports, read, policy) = inputs
        case .failure(let refusal): return refusal.reply
        }
        let before = statuses(for: user, reports: reports, read: read)
        let policyProgram = program.trusted ? program.path : nil
        let policies: @Sendable (Permission) -> PolicyDecision = {
            policy.requestDecision(for: $0, user: user, program: policyProgram)
        }
        let subject = RunPlan.Subject(user: user, program: program.identity, trusted: program.trusted,
                                      scope: order.scope, broker: brokerPrincipal)
        var plan = RunPlan(order.permissions, statuses: before, subject: subject, accuracy: order.accuracy,
                           grants: read.grants, switchedOff: { read.switchedOff($0) }, policies: policies)
        let context = runContext(order, program: program, location: plan.location, reports: reports, id: id,
                                 caller: caller,
                                 peer: peer, user: user, exchange: exchange)
        defer { flushAudit(context) }
        if let refusal = admitRun(order, plan: plan, program: program.path, context: context) { return refusal }
        switch await consented(plan, context: context, policies: policies) {
        case .success(let decided): plan = decided
        case .failure(let refusal): return refusal.reply
        }
        if plan.notStarting {
            return await notStarted(plan, order: order, program: program, context: context, before: before,
                                    enforcement: enforcement)
        }
        return await startRun(plan, order: order, program: program, streams: streams, context: context,
                              exchange: exchange, enforcement: enforcement)
    }

    /// The devices, the ledger and the policy as they are now; a policy or ledger that
    /// cannot be read ends the run before anything is asked.
    func runInputs(_ permissions: [Permission]) async -> Result<([AdapterReport], DecisionRead, Policy), ReplyFailure> {
        let (reports, read) = await gathered(permissions)
        guard case .loaded(let policy) = read.policy else {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                reason: "the policy cannot be read, so nothing was asked or run; fix the file"))))
        }
        if let problem = read.problem {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                reason: "the ledger cannot be read, so nothing was asked or run: \(problem)"))))
        }
        return .success((reports, read, policy))
    }

    /// The run as a request of its program's, for prompts and audit events.
    func runContext(_ order: RunOrder, program: RunProgram, location: LocationAsk?, reports: [AdapterReport], id: Int64,
                    caller: Caller,
                    peer: Peer, user: UserIdentity, exchange: Exchange) -> RequestContext {
        let requester = Requester(pid: peer.pid, uid: user.uid, program: program.path,
                                  untrusted: program.trusted ? nil : Requester.notTrusted(program.untrustedWhy ?? ""),
                                  startedByRun: true)
        var context = RequestContext(
            request: AccessRequest(permissions: order.permissions, reason: order.reason, scope: order.scope ?? .once,
                                   accuracy: order.accuracy),
            caller: caller, wireID: id, peer: peer, requester: requester, user: user, exchange: exchange,
            devices: Self.promptDevices(reports), holder: nil, holderName: "this run of \(program.path)")
        context.location = location
        return context
    }

    /// Audits the run as received, within the budget it is charged to; the refusal when the
    /// person made as many changes as they may.
    func admitRun(_ order: RunOrder, plan: RunPlan, program: String, context: RequestContext) -> Reply? {
        let peer = context.peer
        var received = plan.receivedDetails(program: program)
        if plan.refusedAtOnce, !context.caller.isUnlimited {
            // Refused without asking anyone or changing anything: an attempt a user can repeat
            // at will, so written within the user's attempt budget only (as for requests).
            switch refusals.admit(peer.accountable, cost: 2 * order.permissions.count) {
            case .skip: context.audit.suppress()
            case .record(let leftOut): if leftOut > 0 { received[Self.notRecordedKey] = String(leftOut) }
            }
        }
        // A run that goes on writes the ledger (its row, run_start and run_end, the grants it
        // decides) however it is decided: charged to the person's change budget, as a request
        // that decides is (hostile review 2026-12-01: 183 runs in 20 s from one uid).
        if !plan.refusedAtOnce {
            if let refusal = overChangeBudget("run", id: context.wireID, peer: peer, caller: context.caller,
                                              subject: context.subject) {
                return refusal
            }
            chargeChange(peer, caller: context.caller)
        }
        audit(context, order.permissions, stage: "received", extra: received)
        return nil
    }

    /// 2. Consent: the person asked holds one of the user's prompt slots while asked; once
    /// nobody is asked any more the slot is free for the user's next request while this run goes on.
    func consented(_ plan: RunPlan, context: RequestContext,
                   policies: (Permission) -> PolicyDecision) async -> Result<RunPlan, ReplyFailure> {
        guard plan.asksSomeone else { return .success(plan) }
        let peer = context.peer
        var heldSlots: [UserSlots] = []
        defer { for slots in heldSlots { slots.give(peer.accountable) } }
        guard take(openPrompts, for: peer, unlimited: context.caller.isUnlimited, into: &heldSlots) else {
            return .failure(ReplyFailure(refuse("run", id: context.wireID, peer: peer, subject: context.subject,
                reason: "\(describe(peer)) has \(openPrompts.limit) open prompts already; nothing was asked or run",
                code: .busy)))
        }
        return await asked(plan, context: context, policies: policies)
    }

    /// `ask` on the login terminal, then the password for `auth_self` (and for `ask` where
    /// there is no terminal to ask on): `plan` with what the person decided.
    func asked(_ plan: RunPlan, context: RequestContext,
               policies: (Permission) -> PolicyDecision) async -> Result<RunPlan, ReplyFailure> {
        var plan = plan
        var number: Int64 = 0
        var passwordGroup = plan.toConfirm
        var ended: UndecidedReason?
        var noOneToAsk: String?
        if !plan.toAsk.isEmpty {
            switch await askConsent(plan.toAsk, context: context, policies: policies, number: &number) {
            case .decided(let decided):
                plan.results.merge(ConsentPlan.unnamed(decided, asked: plan.toAsk)) { $1 }
                plan.grants += decided
            case .undecided(let why):
                ended = why
                plan.leave(plan.toAsk, undecided: why)
            case .broken(let error): return .failure(ReplyFailure(.error(error)))
            case .refused(let reply): return .failure(ReplyFailure(reply))
            case .noChannel(let why):
                // As for requests: the password proves a person, never the requester's own "yes".
                passwordGroup = plan.toAsk + passwordGroup
                noOneToAsk = why
            }
        }
        guard !passwordGroup.isEmpty else { return .success(plan) }
        if let ended {
            plan.leave(passwordGroup, undecided: ended)
            return .success(plan)
        }
        switch await confirmPassword(passwordGroup, context: context, policies: policies, number: &number,
                                     instead: noOneToAsk) {
        case .decided(let decided): plan.grants += decided
        case .undecided(let why): plan.leave(passwordGroup, undecided: why)
        case .broken(let error): return .failure(ReplyFailure(.error(error)))
        case .refused(let reply): return .failure(ReplyFailure(reply))
        case .noChannel: break
        }
        return .success(plan)
    }

    /// A run that does not start: denials a person chose are recorded (not asked again); the
    /// reply says what was decided, and the statuses of before.
    func notStarted(_ plan: RunPlan, order: RunOrder, program: RunProgram, context: RequestContext,
                    before: [PermissionStatus], enforcement: LiveEnforcer) async -> Reply {
        var plan = plan
        let denials = plan.grants.filter { $0.decision == .deny }
        if !denials.isEmpty {
            switch await recordRunDenials(denials, subject: context.subject, program: program.grantProgram,
                                          reason: context.reason, enforcement: enforcement) {
            case .success(let recorded):
                for grant in recorded { plan.results[grant.permission] = RequestResult(for: grant, outcome: .denied, term: nil) }
            case .failure(let refusal): return refusal.reply
            }
        }
        let results = plan.withAllowsUnrecorded()
        let ordered = order.permissions.compactMap { results[$0] }
        audit(context, order.permissions, stage: "answered", extra: ["run": "not-started"])
        return .decision(DecisionReply(user: context.user.name, uid: context.user.uid, results: ordered,
                                       permissions: before))
    }

    func recordRunDenials(_ denials: [GrantPlan], subject: Principal, program: Program, reason: String,
                          enforcement: LiveEnforcer) async -> Result<[Grant], ReplyFailure> {
        do {
            return .success(try await enforcement.perform("run") {
                (enforcer) throws(EnforcementError) -> ([Grant], EnforcementReport) in
                do throws(LedgerError) {
                    let grants = try denials.map { (plan) throws(LedgerError) in
                        try Self.recordRunGrant(plan, subject: subject, program: program, reason: reason,
                                                process: nil, accuracy: nil, ledger: enforcer.ledger,
                                                now: enforcer.clock())
                    }
                    return (grants, EnforcementReport())
                } catch {
                    throw .ledger(error)
                }
            })
        } catch {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                                                              reason: "recording the denial failed: \(error)"))))
        }
    }

    /// 3. Start: the run's row (its group id), the program held before exec, its process and
    /// grants recorded, the nodes' entries applied; then it may exec.
    func startRun(_ plan: RunPlan, order: RunOrder, program: RunProgram, streams: [CInt], context: RequestContext,
                  exchange: Exchange, enforcement: LiveEnforcer) async -> Reply {
        let run: Run
        switch await begunRun(NewRun(subject: context.subject, program: program.identity,
                                     permissions: order.permissions, strict: order.strict), enforcement: enforcement) {
        case .success(let begun): run = begun
        case .failure(let refusal): return refusal.reply
        }
        let environment = LaunchEnvironment.clean(order.environment, uid: context.peer.uid)
        let started: HeldProgram
        switch await heldProgram(order, program: program, streams: streams, environment: environment.kept, run: run,
                                 peer: context.peer, enforcement: enforcement) {
        case .success(let held): started = held
        case .failure(let refusal): return refusal.reply
        }
        let results: [Permission: RequestResult]
        switch await recordRunStart(plan, run: run, started: started, program: program, context: context,
                                    details: plan.startDetails(removedEnvironment: environment.removed),
                                    enforcement: enforcement) {
        case .success(let recorded): results = recorded
        case .failure(let refusal): return refusal.reply
        }
        guard started.release() else {
            await endRun(run, status: "not started: \(started.execFailure ?? "the program could not be executed")",
                         enforcement: enforcement)
            return .error(ProtocolError(.badMessage, context: "run", reason: started.execFailure
                ?? "\(program.path) could not be executed; nothing was run"))
        }
        log.info("run started", ["run": String(run.id), "uid": String(context.user.uid), "program": program.path,
                                 "pid": String(started.holder.pid), "gid": String(run.gid)])
        flushAudit(context)
        return await running(started, run: run, results: order.permissions.compactMap { results[$0] },
                             removedEnvironment: environment.removed, user: context.user, exchange: exchange,
                             enforcement: enforcement)
    }

    /// The run's row, with a group id of its own (`beginRunWithItsOwnGroup`).
    func begunRun(_ newRun: NewRun, enforcement: LiveEnforcer) async -> Result<Run, ReplyFailure> {
        let begun: Run?
        do {
            begun = try await enforcement.perform("run") { (enforcer) throws(EnforcementError) -> (Run?, EnforcementReport) in
                do throws(LedgerError) { return (try Self.beginRunWithItsOwnGroup(newRun, enforcer), EnforcementReport()) }
                catch { throw .ledger(error) }
            }
        } catch {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                                                              reason: "the run could not be recorded: \(error)"))))
        }
        guard let run = begun else {
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run", reason: "no group id of "
                + "devaccess run's range (\(RunGroups.first)-\(RunGroups.last)) was free: each one tried is a group's in "
                + "the user database or a user's in /etc/subgid (each skipped run's run_end event says which); the "
                + "administrator must move those out of the range; nothing was run"))))
        }
        return .success(run)
    }

    /// The program started as the caller, held before exec: the caller's groups and the run's
    /// own, the caller's resource limits, `--strict`'s Landlock rules. When it cannot be, the
    /// run ends unstarted.
    func heldProgram(_ order: RunOrder, program: RunProgram, streams: [CInt], environment: [String], run: Run,
                     peer: Peer, enforcement: LiveEnforcer) async -> Result<HeldProgram, ReplyFailure> {
        let groups = Self.callerGroups(peer) + [run.gid]
        var ruleset: LandlockRuleset?
        if order.strict {
            let denied = await strictDenials(granted: order.permissions)
            do {
                ruleset = try LandlockRuleset.allowingEverythingExcept(denied)
            } catch {
                await endRun(run, status: "not started: --strict: \(error)", enforcement: enforcement)
                return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                    reason: "--strict cannot be enforced here (\(error)); nothing was run; run without --strict"))))
            }
        }
        let limits: [ResourceLimit]
        switch Self.callerLimits(peer) {
        case .success(let read): limits = read
        case .failure(let why):
            await endRun(run, status: "not started: the caller's resource limits could not be read", enforcement: enforcement)
            return .failure(ReplyFailure(.error(ProtocolError(.badMessage, context: "run",
                                                              reason: why.description + "; nothing was run"))))
        }
        do throws(HeldProgram.Failure) {
            return .success(try HeldProgram.start(program: program, arguments: order.arguments, environment: environment,
                                                  directory: order.directory, umask: order.umask, streams: streams,
                                                  uid: peer.uid, gid: peer.gid, groups: groups, limits: limits,
                                                  strict: ruleset))
        } catch {
            await endRun(run, status: "not started: \(error.description)", enforcement: enforcement)
            return .failure(ReplyFailure(.error(ProtocolError(.badMessage, context: "run",
                                                              reason: error.description + "; nothing was run"))))
        }
    }

    /// The run's start and its grants recorded, bound to the held program's process, and the
    /// nodes' entries applied: the plan's results with the grants'. When they cannot be, the
    /// program is abandoned and the run ends unstarted.
    func recordRunStart(_ plan: RunPlan, run: Run, started: HeldProgram, program: RunProgram, context: RequestContext,
                        details: [String: String],
                        enforcement: LiveEnforcer) async -> Result<[Permission: RequestResult], ReplyFailure> {
        let process = started.holder
        let (subject, identity, reason, level) = (context.subject, program.grantProgram, context.reason,
                                                  plan.location?.granted)
        let runAllows = plan.runAllows(trusted: program.trusted)
        var results = plan.results
        do {
            let granted = try await enforcement.perform("run") {
                (enforcer) throws(EnforcementError) -> ([Grant], EnforcementReport) in
                let grants: [Grant]
                do throws(LedgerError) {
                    try enforcer.ledger.runStarted(run.id, process: process, details: details, at: enforcer.clock())
                    grants = try runAllows.map { (plan) throws(LedgerError) in
                        try Self.recordRunGrant(plan, subject: subject, program: identity, reason: reason,
                                                process: process, accuracy: plan.accuracy ?? level,
                                                ledger: enforcer.ledger, now: enforcer.clock())
                    }
                } catch {
                    throw .ledger(error)
                }
                return (grants, try enforcer.reconcile())
            }
            for grant in granted {
                results[grant.permission] = RequestResult(for: grant, outcome: .granted,
                                                        term: runAllows.first { $0.permission == grant.permission }?.term.term.word)
            }
            return .success(results)
        } catch {
            started.abandon()
            await endRun(run, status: "not started: \(error)", enforcement: enforcement)
            return .failure(ReplyFailure(.error(ProtocolError(.internal, context: "run",
                                                              reason: "the run could not be started: \(error)"))))
        }
    }

    /// 4. Running: signals relayed; the client's leaving hangs the program up; when the
    /// program exits the run ends.
    func running(_ started: HeldProgram, run: Run, results: [RequestResult], removedEnvironment: [String],
                 user: UserIdentity, exchange: Exchange, enforcement: LiveEnforcer) async -> Reply {
        exchange.onSignal { signal in started.relay(signal) }
        exchange.listen { event in
            if case .departed = event { started.hangUp() }
        }
        exchange.send(.runStarted(RunStartedReply(run: run.id, pid: started.holder.pid, gid: run.gid, results: results,
                                                  removedEnvironment: removedEnvironment)), awaitingAnswer: true)
        let exit = await started.exit()
        // Ended while the zombie still names the program's process: then reaped.
        await endRun(run, status: exit.words, enforcement: enforcement)
        started.reap()
        log.info("run ended", ["run": String(run.id), "uid": String(user.uid), "status": exit.words])
        return .runEnded(RunEndedReply(run: run.id, exit: exit))
    }

    /// The permissions a [Program] section of the policy declares for `path` (sections may
    /// name the program by any path to it: /bin/sh for /usr/bin/dash); nil when none does.
    func declaredPermissions(of path: String) -> [Permission]? {
        guard case .loaded(let policy) = policies.current() else { return nil }
        return (policy.programs[path] ?? policy.programs.values.first { CanonicalPath.orGiven($0.path) == path })?
            .permissions
    }

    /// The caller's supplementary groups as the kernel gave them at connect, without any
    /// group id of devaccess run's range: what its program gets besides the run's own id.
    static func callerGroups(_ peer: Peer) -> [UInt32] {
        peer.groups.filter { !RunGroups.contains($0) }
    }

    /// The caller's resource limits (pam_limits, ulimit), not devaccessd's: read through the
    /// peer's /proc directory pinned at connect, so a peer that is gone (its pid perhaps
    /// another process's by now) gets a refusal, never another process's limits.
    static func callerLimits(_ peer: Peer) -> Result<[ResourceLimit], CallerLimitsUnread> {
        guard let process = peer.process else {
            return .failure(CallerLimitsUnread(description: "the calling process could not be pinned when it "
                + "connected (\(peer.programProblem ?? "?")), so its resource limits cannot be read"))
        }
        switch ResourceLimit.of(process) {
        case .success(let limits): return .success(limits)
        case .failure(let error) where error.rawValue == ESRCH:
            return .failure(CallerLimitsUnread(description: "the calling process (pid \(peer.pid)) has exited, so "
                + "its resource limits are gone; run again from a process that waits for its run"))
        case .failure(let error):
            return .failure(CallerLimitsUnread(description: "the caller's resource limits could not be read (\(error))"))
        }
    }

    struct CallerLimitsUnread: Error, CustomStringConvertible {
        var description: String
    }

    /// What a run gets through device nodes (its group's ACL entries; `--strict`'s Landlock
    /// rules); location is served by the gpsd endpoint instead.
    static let runNodePermissions: [Permission] = [.camera, .microphone]

    /// Begins `new` with a group id only its program can carry. An id the user database
    /// names (the group's members get it at login) or /etc/subgid hands to a user (newgidmap
    /// maps it into a user namespace of theirs, whose root may then take it as a group) would
    /// open the run's nodes to them: such an id is skipped, its row ended unstarted saying
    /// why, and the next one taken. nil after `maxSkippedGroups` such ids in a row.
    static func beginRunWithItsOwnGroup(_ new: NewRun, _ enforcer: Enforcer) throws(LedgerError) -> Run? {
        for _ in 0..<maxSkippedGroups {
            let run = try enforcer.ledger.beginRun(new, at: enforcer.clock())
            guard let holder = otherHolder(ofGroup: run.gid) else { return run }
            try enforcer.ledger.endRuns([(run.id, "not started: group id \(run.gid) skipped: \(holder)")], by: nil,
                                        at: enforcer.clock())
        }
        return nil
    }

    static let maxSkippedGroups = 64

    /// Who else can hold `gid`, in words; nil when nobody can.
    static func otherHolder(ofGroup gid: UInt32) -> String? {
        if let name = UserDatabase.groupName(gid) { return "the user database names it (group \(name))" }
        if let owner = SubordinateIDs.owner(of: gid, file: "/etc/subgid") {
            return "/etc/subgid hands it to \(UserDatabase.userName(owner) ?? "uid \(owner)")"
        }
        return nil
    }

    /// Records the run's end and removes its access (the engine pass sees the process gone).
    func endRun(_ run: Run, status: String, enforcement: LiveEnforcer) async {
        do {
            try await enforcement.perform("run-end") { (enforcer) throws(EnforcementError) -> (Void, EnforcementReport) in
                do throws(LedgerError) {
                    try enforcer.ledger.endRuns([(run.id, status)], by: nil, at: enforcer.clock())
                } catch {
                    // The entries go even when the ledger cannot say so now.
                    enforcer.removeRunEntriesFailingClosed(gids: [run.gid])
                    throw .ledger(error)
                }
                return ((), try enforcer.reconcile())
            }
        } catch {
            log.error("could not record the end of a run", ["run": String(run.id), "error": "\(error)"])
        }
    }

    /// A run's decision: a program grant (the program's path, pinned to its SHA-256 when
    /// the file is not root's alone), `once` bound to the run's process.
    static func recordRunGrant(_ plan: GrantPlan, subject: Principal, program: Program, reason: String,
                               process: ProcessHolder?, accuracy: LocationAccuracy?, ledger: Ledger,
                               now: Date) throws(LedgerError) -> Grant {
        let (scope, expires) = plan.term.recorded(at: now)
        // Every allow of location records its level, exact included, as a request's does.
        let level = plan.permission == .location && plan.decision == .allow ? accuracy ?? .exact : nil
        let new = NewGrant(subject: subject, program: program, permission: plan.permission, decision: plan.decision,
                           scope: scope, expires: expires, decidedBy: plan.decidedBy, method: plan.method,
                           reason: reason, holder: scope == .once ? process : nil, accuracy: level)
        return try ledger.recordGrant(new, at: now)
    }

    /// `--strict`: the capture nodes of the permissions the run was not given (Landlock denies
    /// the program those, whatever its user's groups and ACL entries say).
    func strictDenials(granted: [Permission]) async -> [String] {
        var denied = Set<String>()
        let others = Self.runNodePermissions.filter { !granted.contains($0) }
        for report in await probe.reports(others) {
            for device in report.devices { denied.formUnion(device.nodes.map(\.path)) }
        }
        return denied.sorted()
    }
}
