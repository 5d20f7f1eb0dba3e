import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// Runs engine operations one at a time: the daemon's enforcement queue, or the engine
/// itself in `--offline` mode (under the engine lock).
public protocol EngineRunner: Sendable {
    func run<R: Sendable>(_ operation: String,
                          _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport))
        async throws(InterfaceError) -> R
}

/// The operations of `DevAccessInterface` done by the engine, for one caller: who may do
/// what is decided here, once, for both the daemon and `--offline`.
public struct EngineService: DevAccessInterface {
    public let caller: Caller
    public let runner: any EngineRunner
    public var clock: @Sendable () -> Date
    /// The policy an approval is planned under, as read when it came in (devaccessd's kept
    /// one); nil: the engine's own, read when the approval takes its turn (`--offline`).
    public var policy: PolicyReading?
    /// The machine, the ledger (read-only) and the policy as read in this process, for the
    /// reads served here (`status`, `who`); nil in devaccessd, which passes its own inputs.
    public var reads: EngineReads?
    /// Why the ledger's decisions are unknown when this process cannot read the ledger
    /// (it is root's alone): the CLI says devaccessd could not be reached.
    public var decisionsUnknown: String?

    public init(caller: Caller, runner: any EngineRunner, reads: EngineReads? = nil,
                clock: @escaping @Sendable () -> Date = { Date() }, policy: PolicyReading? = nil) {
        self.caller = caller
        self.runner = runner
        self.reads = reads
        self.clock = clock
        self.policy = policy
    }

    // MARK: Decisions

    public func decide(_ order: DecisionOrder) async throws(InterfaceError) -> DecisionDocument {
        let verb = order.allow ? "grant" : "deny"
        let subject = try Self.currentUser(order.user)
        try requireAdmin(verb, "\(verb) \(order.permission.rawValue) to \(subject)")
        let expires = order.expiresMilliseconds.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) }
        let program = order.program.map { Program(path: CanonicalPath.orGiven($0)) }
        if let program, order.allow, let flaw = Self.changeableByOthers(program.path) {
            throw .refused(operation: verb, reason: "a program grant names a file only root can change, and "
                + "\(program.path) is \(flaw): whoever can change it could run any code with the grant; "
                + "grant the user (without --program) or install the program as root; nothing was recorded")
        }
        let request = Enforcer.DecisionRequest(
            subject: subject, permission: order.permission, deviceID: order.device,
            decision: order.allow ? .allow : .deny,
            scope: expires == nil && order.lastingSeconds == nil ? .always : .duration, expires: expires,
            lastingSeconds: order.lastingSeconds, reason: order.reason ?? "", program: program,
            accuracy: order.accuracy)
        let actor = caller.principal
        let now = clock()
        return try await runner.run(verb) { (engine) throws(EnforcementError) -> (DecisionDocument, EnforcementReport) in
            let outcome = try engine.acting(as: actor).decide(request)
            return (DecisionDocument(outcome, now: now), outcome.report)
        }
    }

    public func revoke(_ order: RevokeOrder) async throws(InterfaceError) -> RevokeDocument {
        let subject = try Self.formerOrCurrentUser(order.user)
        // Giving up one's own access is safe (not from a strict run: it is its user's access);
        // ending someone else's is an admin's call.
        if subject.uid != caller.principal.uid {
            try requireAdmin("revoke", "revoke \(subject)'s \(order.permission.rawValue) grants")
        } else {
            try require(.ownDecisions, "revoke", "revoke \(subject)'s \(order.permission.rawValue) grants")
        }
        let actor = caller.principal
        let now = clock()
        let program = order.program.map(CanonicalPath.orGiven)
        if order.terminate {
            try requireAdmin("revoke", "end \(subject)'s runs (--terminate)", unless: subject.uid == caller.principal.uid)
        }
        var document = try await runner.run("revoke") {
            (engine) throws(EnforcementError) -> (RevokeDocument, EnforcementReport) in
            let outcome = try engine.acting(as: actor).revoke(permission: order.permission, subject: subject,
                                                              deviceID: order.device, reason: order.reason ?? "",
                                                              program: program)
            return (RevokeDocument(outcome, now: now), outcome.report)
        }
        if order.terminate {
            let runs = try await runner.run("revoke") { (engine) throws(EnforcementError) -> ([Run], EnforcementReport) in
                let live = try EnforcementError.ledgerWork { () throws(LedgerError) in try engine.ledger.runs(uid: subject.uid) }
                return (live.filter { run in
                    run.permissions.contains(order.permission) && (program == nil || run.program.path == program)
                }, EnforcementReport())
            }
            document.terminated = await Self.terminate(runs)
        }
        return document
    }

    /// Ends each run's whole process tree (every process carrying its group id, setsid'd
    /// descendants too): SIGTERM, SIGKILL after 5 s. On a thread of its own: it waits.
    static func terminate(_ runs: [Run]) async -> [RevokeDocument.TerminatedProcess] {
        await DetachedThread.run(name: "devaccess terminate") {
            var ended: [RevokeDocument.TerminatedProcess] = []
            for run in runs {
                for outcome in RunProcesses.end(group: run.gid, grace: .seconds(5)) {
                    ended.append(.init(run: run.id, pid: outcome.target.pid, ending: "\(outcome.ending)"))
                }
            }
            return ended
        }
    }

    /// Why `path` is not a file only root can change (RootInstalledFile), or nil when it is.
    /// A path that does not exist yet is refused too: what will be put there is unknown.
    static func changeableByOthers(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return "not there (\(Errno.current))" }
        var checker = RootInstalledFile()
        return checker.flaw(path, expected: FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
    }


    public func reset(_ order: ResetOrder) async throws(InterfaceError) -> ResetDocument {
        let subject = try Self.formerOrCurrentUser(order.user)
        let actor = caller.principal
        let now = clock()
        guard !caller.may(.administer) else {
            return try await runner.run("reset") { (engine) throws(EnforcementError) -> (ResetDocument, EnforcementReport) in
                let outcome = try engine.acting(as: actor).reset(subject: subject, permission: order.permission)
                return (ResetDocument(outcome, subject: subject, permission: order.permission, now: now), outcome.report)
            }
        }
        // A user may forget what they decided themselves at a prompt (their own "deny"),
        // never a denial an administrator recorded: that stays until an administrator resets it.
        try requireAdmin("reset", "forget \(subject)'s decisions", unless: subject.uid == actor.uid)
        try require(.ownDecisions, "reset", "forget \(subject)'s decisions")
        let caller = self.caller
        let outcome = try await runner.run("reset") {
            (engine) throws(EnforcementError) -> (Result<ResetDocument, InterfaceError>, EnforcementReport) in
            let standing = try EnforcementError.ledgerWork { () throws(LedgerError) in
                try engine.ledger.grants(uid: subject.uid, permission: order.permission, now: now)
            }
            if let other = standing.first(where: { $0.decision == .deny && !Self.ownConsent($0) }) {
                let what = order.permission.map { "your \($0.rawValue) denial" } ?? "your denials"
                return (.failure(.refused(operation: "reset", reason: "\(caller.principal) may not forget \(what): "
                    + "grant \(other.id) was decided by \(other.decidedBy) via \(other.method.rawValue), not by you at a "
                    + "prompt; only root and members of group '\(caller.adminGroup)' may reset it")), EnforcementReport())
            }
            let result = try engine.acting(as: actor).reset(subject: subject, permission: order.permission,
                                                            onlyOwnDecisions: true)
            return (.success(ResetDocument(result, subject: subject, permission: order.permission, now: now)),
                    result.report)
        }
        return try outcome.get()
    }

    /// A decision the user made themselves at a prompt (consent or their password).
    static func ownConsent(_ grant: Grant) -> Bool {
        grant.decidedBy.uid == grant.subject.uid && (grant.method == .consent || grant.method == .authSelf)
    }

    public func reconcile() async throws(InterfaceError) -> EnforcementDocument {
        try requireAdmin("reconcile", "reconcile the ledger with the machine")
        let actor = caller.principal
        let now = clock()
        return try await runner.run("reconcile") { (engine) throws(EnforcementError) -> (EnforcementDocument, EnforcementReport) in
            let report = try engine.acting(as: actor).reconcile()
            return (EnforcementDocument(report, now: now), report)
        }
    }

    // MARK: Reading and withdrawing

    public func list(_ query: ListQuery) async throws(InterfaceError) -> GrantListDocument {
        let uid: UInt32?
        if let text = query.user {
            let subject = try Self.formerOrCurrentUser(text)
            if subject.uid != caller.principal.uid { try requireAdmin("list", "list \(subject)'s decisions") }
            uid = subject.uid
        } else {
            // Without --user: everyone's for an admin, one's own for anyone else.
            uid = caller.may(.administer) ? nil : caller.principal.uid
        }
        let now = clock()
        return try await runner.run("list") { (engine) throws(EnforcementError) -> (GrantListDocument, EnforcementReport) in
            let grants = try EnforcementError.ledgerWork { () throws(LedgerError) in
                try engine.ledger.grants(uid: uid, permission: query.permission, includeInactive: query.all, now: now)
            }
            return (GrantListDocument(ledger: engine.ledger.path, grants: grants, now: now), EnforcementReport())
        }
    }

    public func withdraw(_ action: PendingAction) async throws(InterfaceError) -> WithdrawDocument {
        let caller = self.caller
        // A strict run's user's requests are its user's business, as its grants are (hostile
        // review 7: a strict camera run withdrew its user's queued microphone request).
        if !caller.may(.administer) {
            try require(.ownDecisions, "withdraw", "withdraw \(caller.principal)'s request \(action.pending)")
        }
        let outcome = try await runner.run("withdraw") {
            (engine) throws(EnforcementError) -> (Result<WithdrawDocument, InterfaceError>, EnforcementReport) in
            let ledger = engine.ledger
            let found = try EnforcementError.ledgerWork { () throws(LedgerError) in try ledger.pendingRequest(id: action.pending) }
            // Someone else's request is not named to a non-admin: no probing of other users' queue.
            guard let request = found, request.subject.uid == caller.principal.uid || caller.may(.administer) else {
                return (.failure(.notFound("there is no pending request \(action.pending) of yours; "
                    + "'devaccess pending' lists them")), EnforcementReport())
            }
            guard request.isWaiting else {
                return (.failure(.notFound("request \(request.id) was already "
                    + "\(request.resolution?.rawValue ?? "resolved")")), EnforcementReport())
            }
            let resolved = try EnforcementError.ledgerWork { () throws(LedgerError) in
                try ledger.resolvePendingRequest(id: request.id, as: .withdrawn, by: caller.principal,
                                                 note: action.reason ?? "withdrawn by \(caller.principal.name)")
            }
            return (.success(WithdrawDocument(resolved)), EnforcementReport())
        }
        return try outcome.get()
    }

    public func verifyAudit(_ query: AuditVerifyQuery) async throws(InterfaceError) -> AuditVerifyDocument {
        try requireAdmin("audit", "verify the audit trail")
        let caller = self.caller
        let outcome = try await runner.run("audit-verify") {
            (engine) throws(EnforcementError) -> (Result<AuditVerifyDocument, InterfaceError>, EnforcementReport) in
            let ledger = engine.ledger
            let (verification, anchor) = try EnforcementError.ledgerWork {
                () throws(LedgerError) -> (ChainVerification, ArchiveAnchor?) in
                (try ledger.verify(), try ledger.archiveAnchor())
            }
            var document = AuditVerifyDocument(verification, ledger: ledger.path, anchor: anchor)
            if let path = query.archive {
                // devaccessd runs as root: it opens for an admin only archives of its own.
                if caller.principal.uid != 0 {
                    let recorded = try EnforcementError.ledgerWork { () throws(LedgerError) in try ledger.archiveRecords() }
                    guard Self.isOwnArchive(path, ledger: ledger, recorded: recorded) else {
                        return (.failure(.refused(operation: "audit-verify", reason: "\(caller.principal) may not have "
                            + "devaccessd open \(path): for members of '\(caller.adminGroup)' it opens only archives in "
                            + "its state directory or recorded in the ledger; root may name any file")),
                                EnforcementReport())
                    }
                }
                let archive = try EnforcementError.ledgerWork { () throws(LedgerError) in try ledger.verifyArchive(at: path) }
                document.archive = ArchiveVerifyDocument(archive)
            }
            return (.success(document), EnforcementReport())
        }
        return try outcome.get()
    }

    public func archiveAudit(_ order: AuditArchiveOrder) async throws(InterfaceError) -> AuditArchiveDocument {
        try requireAdmin("audit-archive", "archive the audit trail")
        if let target = order.to, caller.principal.uid != 0 {
            throw .refused(operation: "audit-archive", reason: "\(caller.principal) may not choose where devaccessd, "
                + "as root, writes an archive (\(target)): only root may; without --to it goes to the state directory")
        }
        let now = clock()
        let before = Date(timeIntervalSince1970: TimeInterval(order.beforeMilliseconds) / 1000)
        guard before <= now else {
            throw .badArgument("archiving before \(ISOTime.format(before)) would take events not written yet; "
                + "name a time in the past")
        }
        let actor = caller.principal
        return try await runner.run("audit-archive") {
            (engine) throws(EnforcementError) -> (AuditArchiveDocument, EnforcementReport) in
            let outcome = try EnforcementError.ledgerWork { () throws(LedgerError) in
                try engine.ledger.archiveAudit(before: before, to: order.to, by: actor, now: now)
            }
            return (AuditArchiveDocument(outcome, ledger: engine.ledger.path), EnforcementReport())
        }
    }

    public func auditReport(_ query: AuditReportQuery) async throws(InterfaceError) -> AuditReportDocument {
        try requireAdmin("audit", "read the audit trail")
        let filter = AuditFilter(
            since: query.sinceMilliseconds.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) },
            until: query.untilMilliseconds.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) },
            uid: try query.user.map { (text) throws(InterfaceError) in try Self.formerOrCurrentUser(text).uid },
            program: query.program, permission: query.permission?.rawValue, device: query.device, types: query.types)
        let limit = Int(min(query.limit ?? AuditReportQuery.maxLimit, AuditReportQuery.maxLimit))
        var (document, ledger) = try await auditReportPage(query, filter: filter, limit: limit)
        // --follow: nothing new yet. Held until this process (devaccessd, the one writer)
        // appends an event or the wait is over, then read again: pushed, not polled.
        if let wait = query.waitSeconds, query.mode == .events, document.events?.isEmpty ?? true, document.next == nil {
            await ledger.appends.wait(after: max(query.after, document.head ?? 0), limit: .seconds(wait))
            var again = query
            again.verify = false
            let chain = document.chain
            (document, _) = try await auditReportPage(again, filter: filter, limit: limit)
            document.chain = chain
        }
        return document
    }

    /// One `audit-report` reply, read on the engine's queue; and the ledger, to wait on.
    private func auditReportPage(_ query: AuditReportQuery, filter: AuditFilter, limit: Int) async throws(InterfaceError)
        -> (AuditReportDocument, Ledger)
    {
        let outcome = try await runner.run("audit-report") {
            (engine) throws(EnforcementError) -> (Result<(AuditReportDocument, Ledger), InterfaceError>, EnforcementReport) in
            let ledger = engine.ledger
            let result = try EnforcementError.ledgerWork {
                () throws(LedgerError) -> Result<(AuditReportDocument, Ledger), InterfaceError> in
                var document = AuditReportDocument(ledger: ledger.path, mode: query.mode.rawValue)
                let archives = query.archives
                // devaccessd runs as root: it opens for an admin only archives of its own (as audit-verify).
                if !archives.isEmpty, caller.principal.uid != 0 {
                    let recorded = try ledger.archiveRecords()
                    if let other = archives.first(where: { !Self.isOwnArchive($0, ledger: ledger, recorded: recorded) }) {
                        return .failure(.refused(operation: "audit", reason: "\(caller.principal) may not have "
                            + "devaccessd open \(other): for members of '\(caller.adminGroup)' it opens only archives in "
                            + "its state directory or recorded in the ledger; root may name any file"))
                    }
                }
                if query.verify {
                    let (verification, from) = try ledger.verifyFromCheckpoint()
                    document.chain = AuditVerifyDocument(verification, ledger: ledger.path, anchor: try ledger.archiveAnchor())
                    document.chain?.checkedFrom = from
                    if !archives.isEmpty {
                        document.archives = try archives.map { (path) throws(LedgerError) in
                            ArchiveVerifyDocument(try ledger.verifyArchive(at: path))
                        }
                    }
                }
                switch query.mode {
                case .events:
                    document.head = try ledger.newestEventSeq()
                    if query.timeline {
                        let found = try ledger.auditTimelineEvents(filter, after: query.after, limit: limit + 1,
                                                                   archives: archives)
                        document.events = found.prefix(limit).map(AuditEventDocument.init(timeline:))
                        if found.count > limit { document.next = found[limit - 1].seq }
                    } else {
                        let found = try ledger.auditEvents(filter, after: query.after, limit: limit + 1, archives: archives)
                        document.events = found.prefix(limit).map(AuditEventDocument.init)
                        if found.count > limit { document.next = found[limit - 1].seq }
                    }
                    Self.fitReply(&document)
                case .summary:
                    document.summary = try ledger.auditSummary(filter, archives: archives)
                case .event:
                    let seq = query.event ?? 0
                    guard let (record, position) = try ledger.auditEvent(seq: seq, archives: archives) else {
                        return .failure(.notFound("there is no event \(seq) in \(ledger.path)"
                            + (archives.isEmpty ? "" : " or the archive files given")
                            + " (archived events are in their archive files: --archive-file FILE)"))
                    }
                    document.event = AuditEventDocument(record)
                    document.position = position
                }
                return .success((document, ledger))
            }
            return (result, EnforcementReport())
        }
        return try outcome.get()
    }

    // MARK: Privacy switches

    public func setSwitch(_ order: SwitchOrder) async throws(InterfaceError) -> SwitchesDocument {
        let verb = order.off ? "off" : "on"
        try requireAdmin("switch", "switch \(order.permission.rawValue) \(verb) for everyone")
        let now = clock()
        let until = order.expiresMilliseconds.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) }
        let actor = caller.principal
        return try await runner.run("switch") { (engine) throws(EnforcementError) -> (SwitchesDocument, EnforcementReport) in
            // `--for` counts from now, by the engine's clock: not from when the CLI parsed it.
            let engineOrder = Enforcer.SwitchOrder(
                permission: order.permission, off: order.off, hard: order.hard, reason: order.reason ?? "",
                until: order.lastingSeconds.map { engine.clock().addingTimeInterval(TimeInterval($0)) } ?? until)
            let outcome = try engine.acting(as: actor).setSwitch(engineOrder)
            var stillOpen: SwitchesDocument.StillOpen?
            if order.off {
                // Who still holds the nodes: the switch closes nothing already open.
                let nodes = engine.devices.report(for: order.permission).devices.flatMap(\.nodes).compactMap { node in
                    node.facts.map { WatchedNode(path: node.path, major: $0.major, minor: $0.minor) }
                }
                let scan = NodeHolders.scan(for: nodes)
                stillOpen = .init(processes: Set(scan.holders.map(\.pid)).count, uninspected: scan.uninspected)
            }
            return (SwitchesDocument(switches: outcome.switches, changed: outcome.changed, report: outcome.report,
                                     stillOpen: stillOpen, now: now), outcome.report)
        }
    }

    public func switches() async throws(InterfaceError) -> SwitchesDocument {
        let now = clock()
        return try await runner.run("switches") { (engine) throws(EnforcementError) -> (SwitchesDocument, EnforcementReport) in
            let off = try EnforcementError.ledgerWork { () throws(LedgerError) in try engine.ledger.switches() }
            // One whose time ran out but that no run has turned on yet is on.
            return (SwitchesDocument(switches: off.filter { $0.until.map { $0 > now } ?? true }, now: now),
                    EnforcementReport())
        }
    }

    // MARK: Location

    public func location(_ query: LocationQuery) async throws(InterfaceError) -> LocationDocument {
        throw .unavailable("location is served by devaccessd alone (it is gpsd's one client); --offline cannot "
            + "serve it; " + DaemonStart.advice())
    }

    /// Replies are at most `BrokerProtocol.maxReplySize`: a page of unusually large events
    /// is cut short (the client asks for the rest from `next`), never refused. Sizes are
    /// upper bounds counted from the strings (no encoding pass over every page).
    static func fitReply(_ document: inout AuditReportDocument) {
        guard let events = document.events, !events.isEmpty else { return }
        let budget = BrokerProtocol.maxReplySize * 3 / 4 - 16 * 1024
        var used = 0
        var kept = 0
        for event in events {
            used += event.encodedSizeBound
            if used > budget && kept > 0 { break }
            kept += 1
        }
        if kept < events.count {
            document.events = Array(events.prefix(kept))
            document.next = events[kept - 1].seq
        }
    }

    /// An archive devaccessd wrote: named as the ledger records it, or a file of the
    /// archive name directly in the ledger's (private) directory.
    static func isOwnArchive(_ path: String, ledger: Ledger, recorded: [ArchiveAnchor]) -> Bool {
        if recorded.contains(where: { $0.archivePath == path }) { return true }
        guard let slash = path.lastIndex(of: "/") else { return false }
        let directory = String(path[..<slash]), name = path[path.index(after: slash)...]
        return directory == ledger.directory && name.hasPrefix(Ledger.archiveNamePrefix) && name != Ledger.archiveNamePrefix
    }

    // MARK: Helpers

    /// The judge's verdict on `action`, as this operation's refusal: nothing is done.
    private func require(_ action: Authorization.Action, _ operation: String, _ what: String) throws(InterfaceError) {
        guard case .refused(let reason) = caller.judged(action) else { return }
        throw .refused(operation: operation, reason: "\(caller.principal) may not \(what): \(reason)")
    }

    /// The judge's `administer` verdict, as this operation's refusal: nothing is done.
    func requireAdmin(_ operation: String, _ what: String, unless allowed: Bool = false) throws(InterfaceError) {
        guard !allowed, case .refused(let reason) = caller.judged(.administer) else { return }
        if caller.run?.strict == true {
            throw .refused(operation: operation, reason: "\(caller.principal) may not \(what): \(reason)")
        }
        throw .refused(operation: operation, reason: "\(caller.principal) may not \(what): only root and "
            + "members of group '\(caller.adminGroup)' may")
    }

    /// A user a decision is made for: must exist now.
    static func currentUser(_ text: String) throws(InterfaceError) -> Principal {
        try user(text, formerUID: false)
    }

    /// A user whose decisions end or are read: a deleted account's uid is accepted, so its
    /// leftovers can still be cleaned up.
    static func formerOrCurrentUser(_ text: String) throws(InterfaceError) -> Principal {
        try user(text, formerUID: true)
    }

    private static func user(_ text: String, formerUID: Bool) throws(InterfaceError) -> Principal {
        do {
            let identity = try UserDatabase.identity(for: text)
            return Principal(uid: identity.uid, name: identity.name)
        } catch .noSuchUID(let uid) where formerUID {
            return Principal(uid: uid, name: String(uid))
        } catch .lookupFailed(let what, let errno) {
            throw .failed(UserDatabase.LookupError.lookupFailed(what, errno).description)
        } catch {
            throw .badArgument(error.description)
        }
    }
}

extension InterfaceError {
    /// The engine's failures, sorted by what the caller can do about them.
    public init(_ error: EnforcementError) {
        switch error {
        case .ledger(.busy): self = .busy(error.description)
        case .ledger(.invalidArgument(let problem)): self = .badArgument(problem)
        case .ledger(.archiveTarget): self = .badArgument(error.description)
        case .ledger(.crypto): self = .failed(error.description)
        case .ledger: self = .ledgerUnusable(error.description)
        case .unknownDevice: self = .badArgument(error.description)
        case .policyForbids: self = .refused(operation: "grant", reason: error.description)
        case .policyUnreadable: self = .failed(error.description)
        case .endedUnrecorded(_, .busy): self = .busy(error.description)
        case .endedUnrecorded: self = .ledgerUnusable(error.description)
        }
    }
}

/// The group whose members administer devaccess.
public enum AdminGroup {
    public static let name = "devaccess-admin"
}
