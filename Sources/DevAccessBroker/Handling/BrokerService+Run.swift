import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessLaunch

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
        let streams = exchange?.takeDescriptors() ?? []
        // Kept open until the run ends, on purpose: while devaccessd (root) holds the caller's
        // stdin/stdout/stderr, a socket the caller passed as one of them never counts as the
        // run's alone at the gpsd endpoint (SocketHolders), even if the caller hides its own
        // copy from /proc. RunLocationHostileTests.aSocketHiddenFromTheScanIsNotServedAtTheRunsLevel.
        defer { for descriptor in streams { Glibc.close(descriptor) } }
        guard let exchange, streams.count == RunOrder.descriptorCount else {
            return .error(ProtocolError(.badMessage, context: "run",
                reason: "'run' needs its conversation and the caller's stdin, stdout and stderr; nothing was run"))
        }
        guard ledger != nil, let enforcement else {
            return .error(ProtocolError(.internal, context: "run",
                                        reason: "this broker runs without a ledger, so it cannot start programs"))
        }
        if let refusal = judgedRun(order, id: envelope.id, peer: peer) { return refusal }
        let user = identity(of: peer)
        let subject = Principal(uid: user.uid, name: user.name)
        let program: RunProgram
        switch await openProgram(order, peer: peer) {
        case .success(let opened)?: program = opened
        case .failure(let problem)?:
            return refuse("run", id: envelope.id, peer: peer, subject: subject, reason: problem.description,
                          code: .badMessage)
        case nil:
            return refuse("run", id: envelope.id, peer: peer, subject: subject,
                          reason: "\(Self.openingsPerPerson) programs you named are still being looked up (their file "
                              + "system does not answer); try again when it does; nothing was run", code: .busy)
        }
        defer { program.close() }
        var order = order
        if order.permissions.isEmpty {
            guard let declared = declaredPermissions(of: program.path) else {
                return .error(ProtocolError(.badMessage, context: "$.permissions",
                    reason: "name what the program gets (--camera, --microphone): no [Program] section of the "
                        + "policy declares \(program.path); nothing was run"))
            }
            order.permissions = declared
        }
        if let unsupported = order.permissions.first(where: { !Self.runPermissions.contains($0) }) {
            return .error(ProtocolError(.badMessage, context: "$.permissions",
                reason: "a run can be given the camera, the microphone and location; not \(unsupported.rawValue); "
                    + "nothing was run"))
        }

        // 1. The decision: the user's own access, a standing decision for this program, policy, a person.
        let (reports, read) = await gathered(order.permissions)
        guard case .loaded(let policy) = read.policy else {
            return .error(ProtocolError(.internal, context: "run",
                reason: "the policy cannot be read, so nothing was asked or run; fix the file"))
        }
        if let problem = read.problem {
            return .error(ProtocolError(.internal, context: "run",
                reason: "the ledger cannot be read, so nothing was asked or run: \(problem)"))
        }
        let before = statuses(for: user, reports: reports, read: read)
        // A program grant names a path: it stands for code only where only root can change the
        // file. A program its user can change (or swap at its path between devaccessd's checks
        // and the exec) is decided for each run; only the user's own decisions apply to it.
        let standing = RunDecisions(active: read.grants.filter { grant in
            grant.subject.uid == user.uid && (program.trusted || grant.program == nil)
        })
        let policyProgram = program.trusted ? program.path : nil
        let policies: @Sendable (Permission) -> PolicyDecision = {
            policy.requestDecision(for: $0, user: user, program: policyProgram)
        }
        // Location is given at a level, as a request's: asked (exact unless --accuracy), under the policy's cap.
        let location = order.permissions.contains(.location)
            ? LocationAsk(asked: order.accuracy ?? .exact, policy: policies(.location)) : nil
        var results: [Permission: RequestResult] = [:]
        var toAsk: [Permission] = []
        var toConfirm: [Permission] = []
        var plans: [GrantPlan] = []
        for (permission, status) in zip(order.permissions, before) {
            let decision = policies(permission)
            if let off = read.switchedOff(permission) {
                results[permission] = RequestResult(permission: permission, outcome: .restricted,
                    message: "\(permission.rawValue) is " + off.sentence(formatTime: ISOTime.format)
                        + "; a run cannot change that; nothing was asked or run")
                continue
            }
            if decision.action == .deny {
                results[permission] = RequestResult(permission: permission, outcome: .restricted,
                    message: decision.explanation(permission, user: user) + "; a run cannot change that")
                continue
            }
            if status.status == .unavailable {
                results[permission] = RequestResult(permission: permission, outcome: .unavailable,
                    message: "no \(permission.rawValue) is present; nothing was asked or run")
                continue
            }
            if let grant = standing.decision(uid: user.uid, program: program.identity, process: nil,
                                             permission: permission, deviceID: nil),
               // A location allow coarser than this run would get is decided again.
               !(grant.decision == .allow && permission == .location
                   && (grant.locationLevel ?? .exact) < (location?.granted ?? .exact)) {
                var result = Self.result(for: grant, outcome: grant.decision == .allow ? .alreadyAllowed : .alreadyDenied,
                                         term: nil)
                result.message = (grant.decision == .allow ? "already allowed: " : "denied by an earlier decision: ")
                    + Decisions.describe(grant)
                results[permission] = result
                continue
            }
            if status.status == .authorized {
                results[permission] = RequestResult(permission: permission, outcome: .alreadyAllowed,
                    message: "\(user.name) can already use every \(permission.rawValue) device; the program gets "
                        + "that access as any of \(user.name)'s programs does")
                continue
            }
            switch decision.action {
            case .allow:
                plans.append(GrantPlan(permission: permission, decision: .allow,
                                       term: decision.term(order.scope ?? .once),
                                       method: .policy, decidedBy: brokerPrincipal))
            case .ask: toAsk.append(permission)
            case .authSelf: toConfirm.append(permission)
            case .authAdmin:
                results[permission] = RequestResult(permission: permission, outcome: .restricted,
                    message: "policy wants an administrator to decide \(permission.rawValue) for \(user.name); a run "
                        + "does not wait for one: ask them for 'devaccess grant \(permission.rawValue) --user "
                        + "\(user.name) --program \(program.path)'")
            case .deny: break
            }
        }
        let requester = Requester(pid: peer.pid, uid: user.uid, program: program.path,
                                  untrusted: program.trusted ? nil : Requester.notTrusted(program.untrustedWhy ?? ""),
                                  startedByRun: true)
        let devices = reports.flatMap { report in
            report.devices.map { PromptDevice(permission: report.permission, id: $0.id, name: $0.name) }
        }
        var context = RequestContext(
            request: AccessRequest(permissions: order.permissions, reason: order.reason, scope: order.scope ?? .once,
                                   accuracy: order.accuracy),
            wireID: envelope.id, peer: peer, requester: requester, user: user, exchange: exchange, devices: devices,
            holder: nil, holderName: "this run of \(program.path)")
        context.location = location
        defer { flushAudit(context) }
        var received = ["run": "true", "program": program.path]
        if let location {
            received["accuracy"] = location.asked.rawValue
            if location.cappedBy != nil { received["accuracy_granted"] = location.granted.rawValue }
        }
        let refusedAtOnce = toAsk.isEmpty && toConfirm.isEmpty && plans.isEmpty
            && results.values.contains { [.alreadyDenied, .restricted, .unavailable].contains($0.outcome) }
        if refusedAtOnce, !isUnlimited(peer) {
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
        if !refusedAtOnce {
            if let refusal = overChangeBudget("run", id: envelope.id, peer: peer, subject: context.subject) {
                return refusal
            }
            chargeChange(peer)
        }
        audit(context, order.permissions, stage: "received", extra: received)
        var heldSlots: [UserSlots] = []
        defer { for slots in heldSlots { slots.give(peer.accountable) } }
        if !toAsk.isEmpty || !toConfirm.isEmpty {
            guard take(openPrompts, for: peer, into: &heldSlots) else {
                return refuse("run", id: envelope.id, peer: peer, subject: subject,
                              reason: "\(describe(peer)) has \(openPrompts.limit) open prompts already; nothing was "
                                  + "asked or run", code: .busy)
            }
        }
        var number: Int64 = 0
        var passwordGroup = toConfirm
        var ended: UndecidedReason?
        if !toAsk.isEmpty {
            switch await askConsent(toAsk, context: context, policies: policies, number: &number) {
            case .decided(let decided): plans += Self.named(decided, asked: toAsk, results: &results)
            case .undecided(let why):
                ended = why
                for permission in toAsk { results[permission] = Self.undecided(permission, why) }
            case .broken(let error): return .error(error)
            case .refused(let reply): return reply
            case .noChannel: passwordGroup = toAsk + passwordGroup
            }
        }
        if !passwordGroup.isEmpty {
            if let ended {
                for permission in passwordGroup { results[permission] = Self.undecided(permission, ended) }
            } else {
                switch await confirmPassword(passwordGroup, context: context, policies: policies, number: &number,
                                             instead: toAsk.isEmpty ? nil : "no login terminal to ask on") {
                case .decided(let decided): plans += decided
                case .undecided(let why):
                    for permission in passwordGroup { results[permission] = Self.undecided(permission, why) }
                case .broken(let error): return .error(error)
                case .refused(let reply): return reply
                case .noChannel: break
                }
            }
        }
        // Nobody is asked any more: the prompt slot is free for the user's next request while
        // this run goes on.
        for slots in heldSlots { slots.give(peer.accountable) }
        heldSlots.removeAll()
        // Denials a person chose are recorded (not asked again); the run does not start.
        let denials = plans.filter { $0.decision == .deny }
        let allows = plans.filter { $0.decision == .allow }
        let refusedOutcomes: Set<RequestOutcome> = [.denied, .alreadyDenied, .restricted, .unavailable, .undecided]
        if !denials.isEmpty || results.values.contains(where: { refusedOutcomes.contains($0.outcome) }) {
            if !denials.isEmpty {
                let identity = program.grantProgram
                let reason = order.reason ?? ""
                do {
                    let recorded = try await enforcement.perform("run") {
                        (enforcer) throws(EnforcementError) -> ([Grant], EnforcementReport) in
                        do throws(LedgerError) {
                            let grants = try denials.map { (plan) throws(LedgerError) in
                                try Self.recordRunGrant(plan, subject: subject, program: identity, reason: reason,
                                                        process: nil, accuracy: nil, ledger: enforcer.ledger,
                                                        now: enforcer.clock())
                            }
                            return (grants, EnforcementReport())
                        } catch {
                            throw .ledger(error)
                        }
                    }
                    for grant in recorded {
                        results[grant.permission] = Self.result(for: grant, outcome: .denied, term: nil)
                    }
                } catch {
                    return .error(ProtocolError(.internal, context: "run", reason: "recording the denial failed: \(error)"))
                }
            }
            for plan in allows where results[plan.permission] == nil {
                // The wire wants a why with every undecided: nothing was recorded, as for a
                // dismissed prompt (the message says why).
                results[plan.permission] = RequestResult(permission: plan.permission, outcome: .undecided, why: .dismissed,
                    message: "allowed, but not recorded: the run does not start without every permission it asked for")
            }
            let ordered = order.permissions.compactMap { results[$0] }
            audit(context, order.permissions, stage: "answered", extra: ["run": "not-started"])
            return .decision(DecisionReply(user: user.name, uid: user.uid, results: ordered, permissions: before))
        }

        // 2. Start: the run's row (its group id), the program held before exec, its process and
        // grants recorded, the nodes' entries applied; then it may exec.
        let newRun = NewRun(subject: subject, program: program.identity, permissions: order.permissions,
                            strict: order.strict)
        let begun: Run?
        do {
            begun = try await enforcement.perform("run") { (enforcer) throws(EnforcementError) -> (Run?, EnforcementReport) in
                do throws(LedgerError) { return (try Self.beginRunWithItsOwnGroup(newRun, enforcer), EnforcementReport()) }
                catch { throw .ledger(error) }
            }
        } catch {
            return .error(ProtocolError(.internal, context: "run", reason: "the run could not be recorded: \(error)"))
        }
        guard let run = begun else {
            return .error(ProtocolError(.internal, context: "run", reason: "no group id of devaccess run's range "
                + "(\(RunGroups.first)-\(RunGroups.last)) was free: each one tried is a group's in the user database "
                + "or a user's in /etc/subgid (each skipped run's run_end event says which); the administrator "
                + "must move those out of the range; nothing was run"))
        }
        let environment = LaunchEnvironment.clean(order.environment, uid: peer.uid)
        let groups = Self.callerGroups(peer) + [run.gid]
        var ruleset: LandlockRuleset?
        if order.strict {
            let denied = await strictDenials(granted: order.permissions)
            do {
                ruleset = try LandlockRuleset.allowingEverythingExcept(denied)
            } catch {
                await endRun(run, status: "not started: --strict: \(error)", enforcement: enforcement)
                return .error(ProtocolError(.internal, context: "run",
                    reason: "--strict cannot be enforced here (\(error)); nothing was run; run without --strict"))
            }
        }
        let limits: [ResourceLimit]
        switch Self.callerLimits(peer) {
        case .success(let read): limits = read
        case .failure(let why):
            await endRun(run, status: "not started: the caller's resource limits could not be read", enforcement: enforcement)
            return .error(ProtocolError(.badMessage, context: "run", reason: why.description + "; nothing was run"))
        }
        let started: HeldProgram
        do throws(HeldProgram.Failure) {
            started = try HeldProgram.start(program: program, arguments: order.arguments, environment: environment.kept,
                                            directory: order.directory, umask: order.umask, streams: streams,
                                            uid: peer.uid, gid: peer.gid, groups: groups, limits: limits,
                                            strict: ruleset)
        } catch {
            await endRun(run, status: "not started: \(error.description)", enforcement: enforcement)
            return .error(ProtocolError(.badMessage, context: "run", reason: error.description + "; nothing was run"))
        }
        let process = started.holder
        let identity = program.grantProgram
        let reason = order.reason ?? ""
        // A program its user can change gets this run only, whatever term was chosen, and
        // never longer than that term or MaxDuration= (the run's `once` ends by then).
        let runAllows = program.trusted ? allows : allows.map { plan in
            var once = plan
            once.term = ResolvedTerm(.once, cap: Self.runLimit(plan.term))
            return once
        }
        var details = ["removed_environment": environment.removed.joined(separator: " ")]
        for (permission, result) in results { details["\(permission.rawValue)_outcome"] = result.outcome.rawValue }
        let startDetails = details
        do {
            let granted = try await enforcement.perform("run") {
                (enforcer) throws(EnforcementError) -> ([Grant], EnforcementReport) in
                let grants: [Grant]
                do throws(LedgerError) {
                    try enforcer.ledger.runStarted(run.id, process: process, details: startDetails, at: enforcer.clock())
                    grants = try runAllows.map { (plan) throws(LedgerError) in
                        try Self.recordRunGrant(plan, subject: subject, program: identity, reason: reason,
                                                process: process, accuracy: plan.accuracy ?? location?.granted,
                                                ledger: enforcer.ledger, now: enforcer.clock())
                    }
                } catch {
                    throw .ledger(error)
                }
                return (grants, try enforcer.reconcile())
            }
            for grant in granted {
                results[grant.permission] = Self.result(for: grant, outcome: .granted,
                                                        term: runAllows.first { $0.permission == grant.permission }?.term.term.word)
            }
        } catch {
            started.abandon()
            await endRun(run, status: "not started: \(error)", enforcement: enforcement)
            return .error(ProtocolError(.internal, context: "run", reason: "the run could not be started: \(error)"))
        }
        guard started.release() else {
            await endRun(run, status: "not started: \(started.execFailure ?? "the program could not be executed")",
                         enforcement: enforcement)
            return .error(ProtocolError(.badMessage, context: "run", reason: started.execFailure
                ?? "\(program.path) could not be executed; nothing was run"))
        }
        log.info("run started", ["run": String(run.id), "uid": String(user.uid), "program": program.path,
                                 "pid": String(process.pid), "gid": String(run.gid)])
        flushAudit(context)

        // 3. Running: signals relayed; the client's leaving hangs the program up.
        let ordered = order.permissions.compactMap { results[$0] }
        exchange.onSignal { signal in started.relay(signal) }
        exchange.listen { event in
            if case .departed = event { started.hangUp() }
        }
        exchange.send(.runStarted(RunStartedReply(run: run.id, pid: process.pid, gid: run.gid, results: ordered,
                                                  removedEnvironment: environment.removed)), awaitingAnswer: true)
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

    static let runPermissions: [Permission] = [.camera, .microphone, .location]
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
    func endRun(_ run: Run, status: String, enforcement: any DecisionEnforcement) async {
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
    /// The longest a run-only grant may last under `term`: a `for` term's own length, else
    /// the policy's cap (MaxDuration=); nil: while the run lasts.
    static func runLimit(_ term: ResolvedTerm) -> Int64? {
        switch term.term {
        case .duration(let seconds): return min(seconds, term.cap ?? seconds)
        case .once, .always: return term.cap
        }
    }

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
