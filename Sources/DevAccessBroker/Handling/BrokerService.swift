import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessEngine
import DevAccessInterface

/// What devaccessd answers: `hello`, `status` (a fresh probe evaluated with the
/// ledger's decisions and drift and the policy, exactly as `devaccess status` computes
/// it locally, for the peer, or for another user when the peer is an admin), `request`
/// (the consent conversation, BrokerService+Request.swift) and the approval queue
/// (`pending`, `approve`, `reject`, BrokerService+Approval.swift).
///
/// Everything a peer may not do is answered `permission-denied`, a per-user limit it
/// reached `busy`; both are appended to the ledger as `refused` events with the peer's
/// kernel identity (UserBudget keeps a flood of them out).
public final class BrokerService: RequestHandler {
    public static let serverName = "devaccessd \(Daemon.version)"

    let probe: FreshProbe
    /// The group whose members administer devaccess (`Caller.standing`).
    let adminGroup: String
    let ledger: Ledger
    /// Decisions, recorded ACL entries and the policy, read like the probes: fresh per
    /// request, shared by requests that arrive together.
    let decisionReads: Coalescer<DecisionRead>
    let log: BrokerLog
    let configDirectory: String
    /// The policy in force: re-read per request, the last good one kept (PolicyKeeper).
    let policies: PolicyKeeper
    let settings: RequestSettings
    /// Where decisions are recorded and enforced: the one engine queue, which hotplug,
    /// expiry and the periodic runs share, so no two engine runs edit a node at once.
    let enforcement: LiveEnforcer
    /// nil: this broker serves no location (`--no-location`, or tests without gpsd).
    let locations: LocationServing?
    /// Requesters waiting (`--wait`) for an administrator to resolve their request.
    let approvals = ApprovalWaiters()
    /// Who the broker is in the ledger when policy decides (`how=policy`).
    let brokerPrincipal: Principal
    /// How many of a user's attempts that change nothing (refusals, requests answered at
    /// once) reach the audit trail.
    let refusals: UserBudget
    /// Requests that ask, queue or decide, runs, and a user's own revokes, resets and withdraws:
    /// each writes the audit trail, so one user's are limited per minute
    /// (`maxChangesPerMinute`; root and administrators are not limited).
    let changes: UserBudget
    /// `auth_self` passwords: a few PAM threads, one check per uid, back-off per uid.
    let passwords: PasswordChecks
    /// Requests of each user in a consent conversation, and clients of each user waiting
    /// for an administrator (`maxOpenPromptsPerUser`, `maxWaitingPerUser`).
    let openPrompts: UserSlots
    let waitingClients: UserSlots
    /// Runs of each person whose program is being opened (`openProgram`).
    let programOpenings = UserSlots(limit: BrokerService.openingsPerPerson)
    /// Connections subscribed to status changes (`subscribe`), at most a few per user.
    let subscriptions: StatusSubscriptions
    /// The `device_open` audit rows of each user per minute.
    let opens: UserBudget
    /// What a status is computed from (devices, decisions, identities), kept current by the
    /// events that change it (StatusInputsCache); open, request and run read afresh.
    let inputs: StatusInputsCache
    /// False with `DEVACCESSD_STATUS_CACHE=off`: every status reads everything afresh (to
    /// compare, or to rule the cache out when something looks stale).
    let keepsInputs: Bool
    /// Where `ask` is put to a person: the login terminal, when the broker can trust it.
    let consentChannel: @Sendable (Peer, UserIdentity) -> Result<ConsentChannel.Terminal, ConsentChannel.Unavailable> = {
        ConsentChannel.terminal(for: $0, user: $1)
    }

    /// `configDirectory` holds devaccess.conf and its drop-ins (read for every request).
    /// `enforcement`: the daemon's live enforcement, whose queue decisions share.
    public init(probe: FreshProbe, adminGroup: String, ledger: Ledger, configDirectory: String, log: BrokerLog,
                settings: RequestSettings = RequestSettings(),
                enforcement: LiveEnforcer, policy: Policy? = nil,
                policies keeper: PolicyKeeper? = nil, location: (any LocationSource)? = nil) {
        self.probe = probe
        locations = location.map(LocationServing.init)
        self.adminGroup = adminGroup
        self.ledger = ledger
        self.log = log
        self.configDirectory = configDirectory
        let policies = keeper ?? PolicyKeeper(directory: configDirectory, log: log, initial: policy,
                                              keeps: settings.keepsStatusInputs,
                                              failWatchesWith: settings.testFailWatches)
        self.policies = policies
        self.settings = settings
        passwords = PasswordChecks(settings: settings, log: log)
        openPrompts = UserSlots(limit: settings.maxOpenPromptsPerUser)
        waitingClients = UserSlots(limit: settings.maxWaitingPerUser)
        refusals = UserBudget(window: settings.auditWindow)
        changes = UserBudget(burst: settings.maxChangesPerMinute, window: .seconds(60))
        subscriptions = StatusSubscriptions(limitPerUser: settings.maxSubscriptionsPerUser)
        opens = UserBudget(burst: settings.maxAuditedOpensPerMinute, window: settings.auditWindow)
        let me = getuid()
        brokerPrincipal = Principal(uid: me, name: UserDatabase.userName(me) ?? String(me))
        self.enforcement = enforcement
        // Tests (DEBUG builds only set it): every inotify watch fails as when the limit is reached.
        let failWatches = settings.testFailWatches
        let inputs = StatusInputsCache(policyDirectory: configDirectory,
                                       ledgerDirectory: StatusInputsCache.parent(of: ledger.path),
                                       log: log, failWatchesWith: failWatches)
        self.inputs = inputs
        keepsInputs = settings.keepsStatusInputs
        if !keepsInputs { log.notice("status inputs are read afresh for every status (DEVACCESSD_STATUS_CACHE=off)") }
        // This process's own commits (grants, revokes, expiries, switches) count before the
        // writer returns, so before any reply that follows them.
        _ = ledger.commits.observe { inputs.invalidate([.decisions]) }
        policies.observeReloads { inputs.invalidate([.decisions]) }
        decisionReads = Coalescer(name: "devaccessd decisions") {
            var read = DecisionRead(grants: [], records: [], problem: nil,
                                    policy: policies.current())
            read.brokenPolicy = policies.brokenFiles
            do throws(LedgerError) {
                read.grants = try ledger.grants()
                read.records = try ledger.aclEntries()
                read.switches = try ledger.switches()
            } catch {
                log.error("cannot read the ledger for a status", ["error": error.description])
                read.problem = error.description
            }
            return read
        }
        // Every change devaccessd makes or notices runs through the live enforcer:
        // subscriptions hear of it there.
        // Whatever the engine ran for (hotplug, the periodic reconcile, ...) counts as a change.
        enforcement.observe { [weak self] cause in
            self?.inputs.invalidateAll()
            self?.statusesChanged(cause: cause)
        }
    }

    /// Every standing decision, every recorded ACL entry and the policy, read at one moment.
    struct DecisionRead: Sendable {
        var grants: [Grant]
        var records: [ACLEntryRecord]
        /// Privacy switches that are off.
        var switches: [PrivacySwitch] = []
        /// Why the ledger could not be read.
        var problem: String?
        var policy: PolicyReading
        /// Why the policy files do not parse, while `policy` is the last good one in force.
        var brokenPolicy: String?

        /// The switch that has `permission` off for everyone now, if any.
        func switchedOff(_ permission: Permission, now: Date = Date()) -> PrivacySwitch? {
            switches.first { $0.permission == permission && ($0.until.map { $0 > now } ?? true) }
        }
    }

    enum Piece: Sendable {
        case report(AdapterReport)
        case decisions(DecisionRead)
    }

    /// A peer's own status (the common request) is answered without a handler task: from
    /// the reply kept for it (StatusInputsCache, "kept replies"), else computed here from
    /// kept inputs and kept, else the probes and the ledger read are requested right here (no
    /// blocking), and the thread that delivers the last of them evaluates and replies. Everything else,
    /// including a status for a named user (which may be refused and audited), runs as
    /// a task on the handler threads.
    public func start(_ envelope: RequestEnvelope, from peer: Peer, executor: any TaskExecutor, exchange: Exchange) {
        if case .subscribe(let query) = envelope.request {
            subscribe(query, envelope: envelope, peer: peer, exchange: exchange)
            return
        }
        if case .open(let order) = envelope.request {
            Task(executorPreference: executor) {
                let (reply, descriptor) = await self.open(order, id: envelope.id, peer: peer)
                exchange.finish(reply, passing: descriptor)
            }
            return
        }
        if case .status(let query) = envelope.request, query.user == nil {
            // The peer's own status: the engine's table lets every caller see its own (its
            // "status, own" rows, AuthorizationMatrixTests and ReadOperationsTests), so no
            // caller is built here; the engine computes it (`statusReply`).
            let permissions = query.permissions ?? Permission.all
            if keepsInputs {
                // The reply kept for this uid (the kernel's) and this question, with this request's
                // id; or computed from kept inputs right here, and kept.
                let key = StatusInputsCache.ReplyKey(uid: peer.uid, version: envelope.version, permissions: permissions)
                if let line = inputs.keptReply(key, id: envelope.id) {
                    exchange.finish(line: line)
                    return
                }
                if let kept = inputs.keptInputs(permissions, uid: peer.uid) {
                    let line = exchange.encode(statusReply(for: kept.identity, reports: kept.reports,
                                                           read: kept.decisions))
                    if line.count < BrokerProtocol.maxReplySize - 32 {
                        inputs.keep(line, for: key, id: envelope.id, from: kept)
                    }
                    exchange.finish(line: line)
                    return
                }
            }
            gather(permissions, kept: true) { reports, read in
                // This may run on the event loop: only a kept identity is used here; looking
                // one up (NSS: maybe LDAP, maybe a uid with no entry every time) is the
                // handler threads' work.
                if self.keepsInputs, let subject = self.inputs.keptIdentity(uid: peer.uid).0 {
                    exchange.finish(self.statusReply(for: subject, reports: reports, read: read))
                    return
                }
                Task(executorPreference: executor) {
                    exchange.finish(self.statusReply(for: self.keptIdentity(of: peer), reports: reports, read: read))
                }
            }
            return
        }
        Task(executorPreference: executor) { exchange.finish(await self.respond(envelope, from: peer, exchange: exchange)) }
    }

    /// SIGHUP: the policy is read again now (it is anyway at the next request) and the log
    /// says whether it parses.
    public func reload() {
        inputs.invalidate([.decisions])
        policies.reload()
        // Grants the new policy forbids end now, not at the next periodic run.
        enforcement.requestReconcile(trigger: "policy")
    }

    /// Root and members of the admin group: their connections are not limited per user,
    /// and they get the slots kept for administrators.
    public func isPrivileged(_ peer: Peer) -> Bool {
        isUnlimited(peer)
    }

    /// Answers without a conversation: a request that needs a prompt ends undecided.
    public func handle(_ envelope: RequestEnvelope, from peer: Peer) async -> Reply {
        await respond(envelope, from: peer, exchange: nil)
    }

    func respond(_ envelope: RequestEnvelope, from peer: Peer, exchange: Exchange?) async -> Reply {
        switch envelope.request {
        case .hello:
            return .hello(HelloReply(server: Self.serverName, peer: PeerInfo(
                uid: peer.uid, gid: peer.gid, pid: peer.pid, groups: peer.groups,
                user: UserDatabase.userName(peer.uid), program: peer.program, admin: administers(peer))))
        case .status(let query):
            return await status(query, id: envelope.id, peer: peer)
        case .request(let request):
            return await self.request(request, envelope: envelope, peer: peer, exchange: exchange)
        case .promptAnswer:
            // The event loop hands answers to their request; one on its own is refused there.
            return .error(ProtocolError(.badMessage, context: "$.type", reason: "no prompt is waiting for an answer"))
        case .pending:
            return await pendingList(caller: caller(of: peer))
        case .approve(let action):
            return await resolve(action, approve: true, id: envelope.id, peer: peer, caller: caller(of: peer))
        case .reject(let action):
            return await resolve(action, approve: false, id: envelope.id, peer: peer, caller: caller(of: peer))
        case .withdraw, .decide, .revoke, .reset, .list, .reconcile, .auditVerify, .auditArchive, .auditReport,
             .setSwitch, .switches:
            return await administer(envelope.request, id: envelope.id, peer: peer)
        case .run(let order):
            return await run(order, envelope: envelope, peer: peer, exchange: exchange)
        case .runSignal:
            // The event loop hands signals to their run; one on its own is refused there.
            return .error(ProtocolError(.badMessage, context: "$.type", reason: "no program of this connection is running"))
        case .location(let query):
            return await location(query, id: envelope.id, peer: peer)
        case .subscribe, .open:
            // Both need the connection (`start`): pushed updates, a passed descriptor.
            return .error(ProtocolError(.notImplemented, context: "$.type",
                                        reason: "'\(envelope.request.type)' is served on a connection only"))
        }
    }

    // MARK: status

    /// A status for the peer's own user, or for the user it names, judged by the engine
    /// (`EngineService.statusSubject`), computed by it from the inputs gathered here.
    private func status(_ query: StatusQuery, id: Int64, peer: Peer) async -> Reply {
        let subject: UserIdentity
        if let named = query.user {
            let service = EngineService(caller: caller(of: peer), runner: QueuedEngine(enforcement: enforcement))
            do throws(InterfaceError) {
                subject = try service.statusSubject(query)
            } catch {
                return statusFailure(error, named: named, id: id, peer: peer)
            }
        } else {
            subject = keptIdentity(of: peer)
        }
        let (reports, read) = await withCheckedContinuation { continuation in
            gather(query.permissions ?? Permission.all, kept: true) { continuation.resume(returning: ($0, $1)) }
        }
        return statusReply(for: subject, reports: reports, read: read)
    }

    /// The engine's refusal (audited, for the user named), or the user named that is no user.
    private func statusFailure(_ error: InterfaceError, named: String, id: Int64, peer: Peer) -> Reply {
        switch error {
        case .refused(let operation, let reason):
            let subject = (try? UserDatabase.identity(for: named)).map { Principal(uid: $0.uid, name: $0.name) }
            return refuse(operation, id: id, peer: peer, subject: subject, reason: reason)
        case .badArgument(let text):
            return .error(ProtocolError(.noSuchUser, context: "$.user", reason: text))
        default:
            return .error(ProtocolError(.internal, context: "$.user", reason: error.description))
        }
    }

    /// Requests the probes of `permissions` and the decision read side by side (all
    /// start after this call) and calls `completion` on the thread that delivers the last.
    /// `kept`: what `inputs` keeps current is taken from there (on this thread when all of
    /// it is), the rest read afresh and kept; otherwise everything is read afresh.
    func gather(_ permissions: [Permission], kept: Bool = false,
                _ completion: @escaping @Sendable ([AdapterReport], DecisionRead) -> Void) {
        let (reports, decisions, generations): ([Permission: AdapterReport], DecisionRead?,
                                                StatusInputsCache.Generations?)
        if kept && keepsInputs {
            (reports, decisions, generations) = inputs.lookup(permissions, decisions: true)
        } else {
            (reports, decisions, generations) = ([:], nil, nil)
        }
        let missing = permissions.filter { reports[$0] == nil }
        if missing.isEmpty, let decisions {
            completion(permissions.compactMap { reports[$0] }, decisions)
            return
        }
        let found = reports
        let gather = Gather<Piece>(count: missing.count + (decisions == nil ? 1 : 0)) { pieces in
            var reports = found
            var read = decisions ?? DecisionRead(grants: [], records: [], problem: nil, policy: .loaded(Policy()))
            for piece in pieces {
                switch piece {
                case .report(let report): reports[report.permission] = report
                case .decisions(let decisions): read = decisions
                }
            }
            completion(permissions.compactMap { reports[$0] }, read)
        }
        let inputs = self.inputs
        for (index, permission) in missing.enumerated() {
            probe.request(permission) { report in
                if let generations { inputs.store(report, readUnder: generations) }
                gather.deliver(index, .report(report))
            }
        }
        if decisions == nil {
            let readAt = Date()
            decisionReads.request { read in
                if let generations { inputs.store(read, readAt: readAt, readUnder: generations) }
                gather.deliver(missing.count, .decisions(read))
            }
        }
    }

    /// `gather` for async callers.
    func gathered(_ permissions: [Permission]) async -> ([AdapterReport], DecisionRead) {
        await withCheckedContinuation { continuation in
            gather(permissions) { continuation.resume(returning: ($0, $1)) }
        }
    }

    private func statusReply(for subject: UserIdentity, reports: [AdapterReport], read: DecisionRead) -> Reply {
        .status(EngineService.statusReply(for: subject, statusInputs(for: subject, reports: reports, read: read)))
    }

    func statuses(for subject: UserIdentity, reports: [AdapterReport], read: DecisionRead) -> [PermissionStatus] {
        EngineService.statuses(for: subject, statusInputs(for: subject, reports: reports, read: read))
    }

    /// What the engine computes `subject`'s statuses from: the reports and the decision read
    /// gathered here (kept current by `inputs`).
    private func statusInputs(for subject: UserIdentity, reports: [AdapterReport], read: DecisionRead) -> StatusInputs {
        var inputs = StatusInputs(reports: reports, ledger: ledgerReading(read, uid: subject.uid), policy: read.policy)
        inputs.brokenPolicy = read.brokenPolicy
        return inputs
    }

    /// The subject's standing decisions and the recorded ACL entries, as
    /// `LedgerStatus.read` gives them to the local `devaccess status`.
    func ledgerReading(_ read: DecisionRead, uid: UInt32) -> LedgerReading {
        if let problem = read.problem { return .unreadable(path: ledger.path, problem: problem) }
        return .loaded(LedgerSnapshot(path: ledger.path, decisions: Decisions(active: read.grants.filter { $0.subject.uid == uid }),
                                      records: read.records, switches: read.switches))
    }

    /// `identity(of:)` from what `inputs` keeps (status only).
    func keptIdentity(of peer: Peer) -> UserIdentity {
        (keepsInputs ? inputs.identity(uid: peer.uid) : nil) ?? identity(of: peer)
    }

    /// The peer's user as a fresh login sees it (as `devaccess status` does locally);
    /// a uid without a passwd entry gets the groups its process holds.
    func identity(of peer: Peer) -> UserIdentity {
        if let identity = try? UserDatabase.identity(uid: peer.uid) { return identity }
        return UserIdentity(uid: peer.uid, name: String(peer.uid), primaryGID: peer.gid,
                            groups: ([peer.gid] + peer.groups).map { GroupRef(gid: $0, name: UserDatabase.groupName($0)) })
    }

    // MARK: refusals

    func describe(_ peer: Peer) -> String {
        "\(UserDatabase.userName(peer.uid) ?? "uid \(peer.uid)") (uid \(peer.uid), pid \(peer.pid))"
    }

    /// The detail on a user's next written attempt: how many of theirs were answered but not written.
    static let notRecordedKey = "attempts_not_recorded_before"

    /// `code`: `permission-denied` for what the peer may not do, `busy` for a per-user
    /// limit it reached; either way audited as `refused`, as many as the throttle lets through.
    func refuse(_ operation: String, id: Int64, peer: Peer, subject: Principal?, reason: String,
                code: ErrorCode = .permissionDenied) -> Reply {
        let verdict = refusals.admit(peer.accountable)
        if case .record(let leftOut) = verdict {
            let actor = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
            var details = ["operation": operation, "request_id": String(id), "pid": String(peer.pid),
                           "gid": String(peer.gid), "reason": reason]
            if let problem = peer.programProblem { details["program_problem"] = problem }
            if leftOut > 0 { details[Self.notRecordedKey] = String(leftOut) }
            if code != .permissionDenied { details["code"] = code.rawValue }
            let event = AuditEvent(type: .refused, actor: actor, subject: subject, program: peer.program, details: details)
            log.notice("refused", ["operation": operation, "uid": String(peer.uid), "pid": String(peer.pid),
                                   "program": peer.program ?? "-", "subject": subject?.description ?? "-",
                                   "not_recorded_before": String(leftOut)])
            do {
                try ledger.append(event)
            } catch {
                log.error("could not record a refusal in the ledger", ["error": error.description])
            }
        }
        return .error(ProtocolError(code, context: operation, reason: reason))
    }

    /// Whether `peer` may make one more change now; nil, or the busy refusal to send. Only
    /// what changes something is charged (`chargeChange`): refusals have a budget of their own.
    func overChangeBudget(_ operation: String, id: Int64, peer: Peer, caller: Caller, subject: Principal?) -> Reply? {
        guard !caller.isUnlimited, changes.exhausted(peer.accountable) else { return nil }
        return refuse(operation, id: id, peer: peer, subject: subject,
                      reason: "\(describe(peer)) made \(changes.burst) requests that ask or change something in "
                          + "the last minute, the most one user may; try again in a minute; nothing was asked or recorded",
                      code: .busy)
    }

    func chargeChange(_ peer: Peer, caller: Caller) {
        if !caller.isUnlimited { _ = changes.admit(peer.accountable) }
    }
}
