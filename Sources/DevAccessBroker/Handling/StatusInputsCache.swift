import FoundationEssentials
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessHardware

/// The machine-side inputs of a status, kept current by the events that change them, so a
/// status is served without probing udev, stat'ing every node, reading the ledger and the
/// policy files and asking NSS each time (docs/performance.md, "Status from kept state").
///
/// What is kept, and what makes it stale:
/// - **device reports** (udev's devices, each node's stat and ACL): inotify on every node
///   of the last reports (`IN_ATTRIB`: chmod, chown, setfacl, ours and anyone's; the node
///   deleted or moved), on the directories that hold them and on `/dev`, `/dev/snd` and
///   udev's database `/run/udev/data` (a node or a device appearing, going, or udev
///   rewriting what it knows of one), and every run of the live enforcer (hotplug, the
///   periodic reconcile). Location's report also holds gpsd's answer, for which no event
///   exists: it lives `gpsdLifetime` (1 s).
/// - **decisions** (grants, recorded ACL entries, switches, the policy): every ledger
///   commit of this process (`Ledger.commits`, before the writer returns), inotify on the
///   state directory (a commit by anything else) and on the policy directory and its
///   `conf.d`, a SIGHUP, and time: a read is good until the first grant or switch in it
///   runs out (and never once the clock went back). A read is not kept while a policy
///   file is a symlink or has another hard link (edited through the other name, it
///   changes with no event on the policy directory).
/// - **identities** (a user's name, primary group and the groups `getgrouplist` gives):
///   inotify on `/etc` for `passwd`, `group` and `nsswitch.conf` (tools replace them by
///   rename, so the directory is watched, not the files; a write in place counts from its
///   first byte, not its close). When nsswitch.conf names a source other than `files` for
///   passwd, group or initgroups (LDAP, SSSD, systemd's userdb), which no event covers, an
///   identity lives `nssLifetime` (1 s), as when /etc is not on a local file system (NFS,
///   9p: changes made by another machine make no event). When any of the three is a symlink or has another
///   hard link (its changes can happen where /etc's watch sees nothing), identities are not
///   kept.
///
/// Truth first: the inotify queue is read before every lookup, and the kernel queues an
/// event before the system call that caused it returns, so a status asked after a change
/// was made never gets what was kept from before it. A value is stored only if nothing
/// invalidated its input while it was being read (a generation per input), and only if
/// every watch covering it already stood when the read began (a new watch: the value is
/// dropped, the next request reads again). Whatever cannot be watched (inotify_init or
/// inotify_add_watch failing, ENOSPC on watches, a queue overflow) is read again for
/// every request, and the log says so once: slower, never stale.
///
/// **Kept replies.** A status computed entirely from kept inputs (every report, the decisions
/// and the asker's identity) is kept encoded, per uid (the kernel's, from the connection),
/// protocol version and permission list asked, with the generations it was computed under
/// and the first instant it stops being true (the first grant or switch end in the decisions,
/// location's gpsd lifetime, an NSS identity's lifetime; never once the wall clock went back
/// before the decisions were read). A status whose key matches, whose generations are
/// current (after the queue was read) and whose instant has not come gets those bytes with
/// its own id; anything else computes. Any input changing drops them all; at most
/// `maxReplies` and `maxReplyBytes`, the least recently served going first.
final class StatusInputsCache: Sendable {
    enum Input: Int, CaseIterable, Sendable {
        case devices, decisions, identities

        var name: String {
            switch self {
            case .devices: return "device reports (udev, node stat and ACLs)"
            case .decisions: return "decisions (ledger and policy)"
            case .identities: return "user identities (NSS)"
            }
        }
    }

    /// Lifetime of location's report (gpsd's side: reachable, receivers, the gate).
    static let gpsdLifetime: UInt64 = 1_000_000
    /// Lifetime of an identity when NSS has a source other than files.
    static let nssLifetime: UInt64 = 1_000_000

    /// A generation per input: what a read began under.
    struct Generations: Sendable {
        fileprivate var values: [UInt64]
        subscript(_ input: Input) -> UInt64 { values[input.rawValue] }
    }

    /// What a kept reply answers: whose status, in which protocol version, which permissions
    /// (in the order asked; all when none were named).
    struct ReplyKey: Hashable, Sendable {
        var uid: UInt32
        var version: Int64
        var permissions: [Permission]
    }

    /// Until when what was looked up stays true without an event.
    struct Validity: Sendable {
        /// Monotonic microseconds (location's gpsd side, an NSS identity): true before it.
        var monotonicUntil: UInt64?
        /// The first grant or switch end in the decisions: true before it.
        var wallUntil: Date?
        /// When the decisions were read: not true once the wall clock is before it.
        var wallFrom: Date?

        func holds(monotonic now: UInt64, wall: Date) -> Bool {
            if let monotonicUntil, now >= monotonicUntil { return false }
            if let wallUntil, wall >= wallUntil { return false }
            if let wallFrom, wall < wallFrom { return false }
            return true
        }

        mutating func end(monotonic at: UInt64) {
            monotonicUntil = Swift.min(monotonicUntil ?? at, at)
        }
    }

    /// Every input of one status, each kept and current, looked up at one moment.
    struct KeptInputs: Sendable {
        /// In the order of the permissions asked.
        var reports: [AdapterReport]
        var decisions: BrokerService.DecisionRead
        var identity: UserIdentity
        fileprivate var generations: [UInt64]
        fileprivate var validity: Validity
    }

    /// Kept replies: at most this many, and this many bytes in all.
    static let maxReplies = 256
    static let maxReplyBytes = 4 << 20

    private struct KeptReply {
        /// `{"version":V,"id":`: the asker's id goes after it.
        var head: [UInt8]
        /// Everything after the id.
        var tail: [UInt8]
        var generations: [UInt64]
        var validity: Validity
        var lastServed: UInt64
        var size: Int { head.count + tail.count }
    }

    private struct Registration {
        var input: Input
        /// nil: every entry; otherwise only these names.
        var names: Set<String>?
        var mask: UInt32
    }

    private struct KeptReport {
        var report: AdapterReport
        var generation: UInt64
        var at: UInt64
    }

    private struct KeptDecisions {
        var read: BrokerService.DecisionRead
        var generation: UInt64
        var readAt: Date
        var validUntil: Date?
    }

    private struct KeptIdentity {
        var identity: UserIdentity
        var generation: UInt64
        var at: UInt64
        var lifetime: UInt64?
    }

    private struct State {
        var generations = [UInt64](repeating: 1, count: Input.allCases.count)
        var reports: [Permission: KeptReport] = [:]
        var decisions: KeptDecisions?
        var identities: [UInt32: KeptIdentity] = [:]
        var replies: [ReplyKey: KeptReply] = [:]
        var replyBytes = 0
        var replyServes: UInt64 = 0
        var watches: [CInt: [Registration]] = [:]
        /// Inputs a watch could not be set for: read again for every request until one is.
        var unwatched: [Input: String] = [:]
        var reader = InotifyReader(capacity: 8192)
    }

    private let state = Mutex(State())
    private let descriptor: CInt
    /// The inotify instance, owned here (none when inotify_init1 failed).
    private let owner: FileDescriptor?
    private let log: BrokerLog
    private let policyDirectory: String
    private let ledgerDirectory: String?
    private let accountsDirectory: String
    private let nsswitchPath: String
    /// Where glibc asks nscd first; while it listens, identities come from its cache.
    private let nscdSocketPath: String
    static let nscdSocket = "/var/run/nscd/socket"
    /// DEBUG tests: every watch fails with this errno (as when the watch limit is reached).
    private let failWatchesWith: CInt?

    static let deviceDirectories = ["/dev", "/dev/snd", "/run/udev/data"]
    static let accountNames: Set<String> = ["passwd", "group", "nsswitch.conf"]

    init(policyDirectory: String, ledgerDirectory: String?, log: BrokerLog, accountsDirectory: String = "/etc",
         nscdSocket: String = StatusInputsCache.nscdSocket, failWatchesWith: CInt? = nil) {
        self.log = log
        self.policyDirectory = policyDirectory
        self.ledgerDirectory = ledgerDirectory
        self.accountsDirectory = accountsDirectory
        nscdSocketPath = nscdSocket
        nsswitchPath = accountsDirectory + "/nsswitch.conf"
        self.failWatchesWith = failWatchesWith
        descriptor = inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK))
        owner = descriptor >= 0 ? FileDescriptor(owning: descriptor) : nil
        if descriptor < 0 {
            let problem = Errno.current.description
            log.warning("status inputs cannot be watched (inotify_init1 failed); every status reads the machine "
                        + "again", ["error": problem])
            state.withLock { state in
                for input in Input.allCases { state.unwatched[input] = problem }
            }
        }
    }


    // MARK: lookups (each reads the inotify queue first)

    /// The kept reports of `permissions` that are current, and the generations a read of
    /// the others must begin under.
    func lookup(_ permissions: [Permission], decisions wantDecisions: Bool)
        -> (reports: [Permission: AdapterReport], decisions: BrokerService.DecisionRead?, generations: Generations)
    {
        let now = MonotonicClock.microseconds()
        let wall = Date()
        return state.withLock { state in
            drain(&state)
            var found: [Permission: AdapterReport] = [:]
            for permission in permissions {
                if let kept = Self.currentReport(permission, state, now: now) { found[permission] = kept.report }
            }
            let decisions = wantDecisions ? Self.currentDecisions(state, wall: wall)?.read : nil
            return (found, decisions, Generations(values: state.generations))
        }
    }

    private static func currentReport(_ permission: Permission, _ state: State, now: UInt64) -> KeptReport? {
        guard state.unwatched[.devices] == nil, let kept = state.reports[permission],
              kept.generation == state.generations[Input.devices.rawValue] else { return nil }
        if permission == .location && now &- kept.at >= gpsdLifetime { return nil }
        return kept
    }

    private static func currentDecisions(_ state: State, wall: Date) -> KeptDecisions? {
        guard state.unwatched[.decisions] == nil, let kept = state.decisions,
              kept.generation == state.generations[Input.decisions.rawValue], wall >= kept.readAt,
              kept.validUntil.map({ wall < $0 }) ?? true else { return nil }
        return kept
    }

    private static func currentIdentity(_ uid: UInt32, _ state: State, now: UInt64) -> KeptIdentity? {
        guard state.unwatched[.identities] == nil, let kept = state.identities[uid],
              kept.generation == state.generations[Input.identities.rawValue],
              kept.lifetime.map({ now &- kept.at < $0 }) ?? true else { return nil }
        return kept
    }

    /// Every input of a status of `permissions` for `uid`, when all of it is kept and
    /// current (one lock, after reading the queue); nil when anything must be read.
    func keptInputs(_ permissions: [Permission], uid: UInt32) -> KeptInputs? {
        let now = MonotonicClock.microseconds()
        let wall = Date()
        return state.withLock { state -> KeptInputs? in
            drain(&state)
            var validity = Validity()
            var reports: [AdapterReport] = []
            reports.reserveCapacity(permissions.count)
            for permission in permissions {
                guard let kept = Self.currentReport(permission, state, now: now) else { return nil }
                if permission == .location { validity.end(monotonic: kept.at &+ Self.gpsdLifetime) }
                reports.append(kept.report)
            }
            guard let decisions = Self.currentDecisions(state, wall: wall),
                  let identity = Self.currentIdentity(uid, state, now: now) else { return nil }
            validity.wallUntil = decisions.validUntil
            validity.wallFrom = decisions.readAt
            if let lifetime = identity.lifetime { validity.end(monotonic: identity.at &+ lifetime) }
            return KeptInputs(reports: reports, decisions: decisions.read, identity: identity.identity,
                              generations: state.generations, validity: validity)
        }
    }

    /// The kept reply for `key` with `id` as its id, when it is still true; nil otherwise
    /// (the status is computed).
    func keptReply(_ key: ReplyKey, id: Int64) -> [UInt8]? {
        let now = MonotonicClock.microseconds()
        let wall = Date()
        let parts = state.withLock { state -> (head: [UInt8], tail: [UInt8])? in
            drain(&state)
            guard var kept = state.replies[key] else { return nil }
            guard kept.generations == state.generations, kept.validity.holds(monotonic: now, wall: wall) else {
                state.replies[key] = nil
                state.replyBytes -= kept.size
                return nil
            }
            state.replyServes &+= 1
            kept.lastServed = state.replyServes
            state.replies[key] = kept
            return (kept.head, kept.tail)
        }
        guard let parts else { return nil }
        var line: [UInt8] = []
        line.reserveCapacity(parts.head.count + 20 + parts.tail.count)
        line.append(contentsOf: parts.head)
        Self.appendDecimal(id, to: &line)
        line.append(contentsOf: parts.tail)
        return line
    }

    /// Keeps `line`, the reply with id `id` to the status `key` computed from `inputs`, unless
    /// an input changed since they were looked up or the line is not shaped as expected.
    func keep(_ line: [UInt8], for key: ReplyKey, id: Int64, from inputs: KeptInputs) {
        guard line.count <= Self.maxReplyBytes / 16 else { return }
        // The envelope begins `{"version":V,"id":ID,`; anything else is not spliced into.
        var head = Array(#"{"version":"#.utf8)
        Self.appendDecimal(key.version, to: &head)
        head.append(contentsOf: #","id":"#.utf8)
        var prefix = head
        Self.appendDecimal(id, to: &prefix)
        prefix.append(UInt8(ascii: ","))
        guard id >= 0, line.count > prefix.count, line.starts(with: prefix) else { return }
        let tail = Array(line[(prefix.count - 1)...])
        state.withLock { state in
            drain(&state)
            guard state.generations == inputs.generations else { return }
            state.replyServes &+= 1
            let kept = KeptReply(head: head, tail: tail, generations: inputs.generations, validity: inputs.validity,
                                 lastServed: state.replyServes)
            if let old = state.replies.updateValue(kept, forKey: key) { state.replyBytes -= old.size }
            state.replyBytes += kept.size
            while state.replies.count > Self.maxReplies || state.replyBytes > Self.maxReplyBytes,
                  let oldest = state.replies.min(by: { $0.value.lastServed < $1.value.lastServed }) {
                state.replies[oldest.key] = nil
                state.replyBytes -= oldest.value.size
            }
        }
    }

    /// How many replies are kept (tests).
    var keptReplyCount: Int { state.withLock { $0.replies.count } }

    static func appendDecimal(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var rest = value.magnitude
        let start = bytes.count
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        bytes[start...].reverse()
    }

    /// The current generations (after reading the queue): take them before a read.
    func generations() -> Generations {
        state.withLock { state in
            drain(&state)
            return Generations(values: state.generations)
        }
    }

    /// Keeps `report`, read under `generations`, unless something changed meanwhile or a
    /// watch its nodes need did not stand before the read.
    func store(_ report: AdapterReport, readUnder generations: Generations) {
        let at = MonotonicClock.microseconds()
        var paths: [(String, Input, WatchKind)] = Self.deviceDirectories.map { ($0, .devices, .directory) }
        for device in report.devices {
            for node in device.nodes {
                paths.append((node.path, .devices, .node))
                paths.append((Self.parent(of: node.path), .devices, .directory))
            }
        }
        state.withLock { state in
            let fresh = ensure(paths, &state)
            drain(&state)
            guard fresh, state.unwatched[.devices] == nil,
                  state.generations[Input.devices.rawValue] == generations[.devices] else { return }
            state.reports[report.permission] = KeptReport(report: report, generation: generations[.devices], at: at)
        }
    }

    /// Keeps a decision read begun at `readAt` under `generations` (same rules).
    func store(_ read: BrokerService.DecisionRead, readAt: Date, readUnder generations: Generations) {
        // A read that failed (a locked or damaged ledger) is not kept: the next status tries again.
        guard read.problem == nil else { return }
        var paths: [(String, Input, WatchKind)] = [(policyDirectory, .decisions, .directory),
                                                   (policyDirectory + "/conf.d", .decisions, .directory)]
        if let ledgerDirectory { paths.append((ledgerDirectory, .decisions, .directory)) }
        let ends = read.grants.compactMap(\.expires) + read.switches.compactMap(\.until)
        let validUntil = ends.min()
        // A policy file that is a symlink or has another hard link changes, edited through its
        // other name, with no event on the policy directory: such a read is not kept. (Checked
        // after the read. A symlink put in place since is an event on the directory; a second
        // hard link made since is not, as link() tells only watches on the file itself: that
        // read stays kept until the next live-enforcer run; a known limit, docs/mechanisms.md.)
        guard policyFilesHaveSingleNames() else { return }
        state.withLock { state in
            let fresh = ensure(paths, &state)
            drain(&state)
            guard fresh, state.unwatched[.decisions] == nil,
                  state.generations[Input.decisions.rawValue] == generations[.decisions] else { return }
            state.decisions = KeptDecisions(read: read, generation: generations[.decisions], readAt: readAt,
                                            validUntil: validUntil)
        }
    }

    /// The kept identity of `uid` when it is still true, with the generations it was looked
    /// up under; never asks NSS (safe on the event loop: NSS may be LDAP or a varlink call).
    func keptIdentity(uid: UInt32) -> (UserIdentity?, Generations) {
        let now = MonotonicClock.microseconds()
        return state.withLock { state -> (UserIdentity?, Generations) in
            drain(&state)
            let generations = Generations(values: state.generations)
            return (Self.currentIdentity(uid, state, now: now)?.identity, generations)
        }
    }

    /// The user `uid` as a fresh login sees it, kept while /etc says nothing changed (and
    /// at most `nssLifetime` when NSS has sources no event covers); nil: no passwd entry
    /// (not kept: such a caller's groups come from its process).
    func identity(uid: UInt32) -> UserIdentity? {
        let (kept, generations) = keptIdentity(uid: uid)
        if let kept { return kept }
        // nscd answers before the files and forgets a change on its own schedule: an identity
        // read right after /etc's event can be its old list, so it only gets the lifetime.
        // /etc on NFS or 9p (a diskless client, a VM sharing its host's root): an edit made
        // by the other machine makes no event here, so it gets the lifetime too.
        let lifetime: UInt64? = Self.nssOnlyFiles(nsswitchPath) && !Self.isSocket(nscdSocketPath)
            && PolicyFilesWatch.isLocal(accountsDirectory) ? nil : Self.nssLifetime
        let at = MonotonicClock.microseconds()
        guard let identity = try? UserDatabase.identity(uid: uid) else { return nil }
        // A database or nsswitch.conf that is a symlink, or a file with a second hard link,
        // can be edited where /etc's watch sees nothing (the target's own directory): not
        // kept at all, rather than kept `nssLifetime`, since even 1 s would serve a status
        // that is false after a change made before it was asked. (Checked after the read: a
        // symlink put in place since is a rename on /etc, an event; a second hard link made
        // since is not, and stays kept until the next live-enforcer run: a known limit.)
        guard Self.singleName(accountsDirectory + "/passwd"), Self.singleName(accountsDirectory + "/group"),
              Self.singleName(nsswitchPath, orAbsent: true) else {
            return identity
        }
        let paths: [(String, Input, WatchKind)] = [(accountsDirectory, .identities, .accounts)]
        state.withLock { state in
            let fresh = ensure(paths, &state)
            drain(&state)
            guard fresh, state.unwatched[.identities] == nil,
                  state.generations[Input.identities.rawValue] == generations[.identities] else { return }
            if state.identities.count > 4096 { state.identities.removeAll() }
            state.identities[uid] = KeptIdentity(identity: identity, generation: generations[.identities], at: at,
                                                 lifetime: lifetime)
        }
        return identity
    }

    // MARK: invalidation from inside the process

    /// This process committed to the ledger, reloaded the policy, or the live enforcer ran.
    func invalidate(_ inputs: [Input]) {
        state.withLock { state in
            for input in inputs { Self.bump(input, &state) }
        }
    }

    func invalidateAll() { invalidate(Input.allCases) }

    private static func bump(_ input: Input, _ state: inout State) {
        state.generations[input.rawValue] &+= 1
        switch input {
        case .devices: state.reports.removeAll(keepingCapacity: true)
        case .decisions: state.decisions = nil
        case .identities: state.identities.removeAll(keepingCapacity: true)
        }
        // A kept reply holds every input: whichever changed, none is true any more.
        state.replies.removeAll()
        state.replyBytes = 0
    }

    // MARK: inotify

    enum WatchKind {
        /// A directory whose entries appearing, going or being rewritten matter.
        case directory
        /// A node itself: its mode, owner and ACL (any path it is reached by), its end.
        case node
        /// /etc: only the account databases and nsswitch.conf.
        case accounts
    }

    private static func mask(_ kind: WatchKind, _ input: Input) -> UInt32 {
        switch kind {
        case .node:
            return UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF) | UInt32(IN_DONT_FOLLOW)
        case .accounts:
            // IN_MODIFY: a database written in place (`>>`, truncation, a tool holding it
            // open) is what NSS reads from the first write, long before the close. It fires
            // for every write to anything in /etc; the names filter it (`drain`).
            return UInt32(IN_CLOSE_WRITE) | UInt32(IN_MODIFY) | UInt32(IN_MOVED_TO) | UInt32(IN_MOVED_FROM)
                | UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_ATTRIB) | UInt32(IN_ONLYDIR)
        case .directory:
            var mask = UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM) | UInt32(IN_MOVED_TO)
                | UInt32(IN_ONLYDIR) | UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF)
            // Files rewritten in place (policy, the ledger) matter; in the device directories
            // nodes appear by mknod or rename and udev renames its database files into place,
            // while anyone may open /dev/null for writing: no IN_CLOSE_WRITE there.
            if input != .devices { mask |= UInt32(IN_CLOSE_WRITE) }
            // A ledger commit writes the WAL in place; a policy file made unreadable counts.
            if input == .decisions { mask |= UInt32(IN_MODIFY) | UInt32(IN_ATTRIB) }
            return mask
        }
    }

    /// Makes sure every path has its watch; false when a watch was new (the value read
    /// before it cannot be trusted) or could not be made (the input is then unwatched).
    private func ensure(_ paths: [(String, Input, WatchKind)], _ state: inout State) -> Bool {
        guard descriptor >= 0 else { return false }
        var fresh = true
        var failed: [Input: String] = [:]
        var succeeded = Set<Input>()
        for (path, input, kind) in paths {
            switch addWatch(path, input: input, kind: kind, &state) {
            case .existing: succeeded.insert(input)
            case .new:
                succeeded.insert(input)
                fresh = false
            case .absent:
                // Watch the nearest directory that exists for the missing part to appear.
                guard kind != .node else { continue }
                var child = path
                var parent = Self.parent(of: path)
                var outcome = WatchOutcome.absent
                while outcome == .absent && child != "/" {
                    outcome = addWatch(parent, input: input, kind: .directory, names: [Self.base(of: child)],
                                       mask: UInt32(IN_CREATE) | UInt32(IN_MOVED_TO) | UInt32(IN_ONLYDIR), &state)
                    child = parent
                    parent = Self.parent(of: parent)
                }
                if case .failed(let problem) = outcome { failed[input] = problem }
                if outcome == .new { fresh = false }
            case .failed(let problem):
                failed[input] = problem
            }
        }
        for (input, problem) in failed {
            fresh = false
            if state.unwatched[input] == nil {
                state.unwatched[input] = problem
                Self.bump(input, &state)
                log.warning("cannot watch the status inputs; status reads them again for every request until a "
                            + "watch can be set", ["input": input.name, "error": problem])
            }
        }
        for input in succeeded where failed[input] == nil {
            if state.unwatched.removeValue(forKey: input) != nil {
                fresh = false
                log.notice("the status inputs are watched again; status serves them kept", ["input": input.name])
            }
        }
        return fresh
    }

    private enum WatchOutcome: Equatable {
        case existing, new, absent
        case failed(String)
    }

    private func addWatch(_ path: String, input: Input, kind: WatchKind, _ state: inout State) -> WatchOutcome {
        addWatch(path, input: input, kind: kind, names: kind == .accounts ? Self.accountNames : nil,
                 mask: Self.mask(kind, input), &state)
    }

    private func addWatch(_ path: String, input: Input, kind: WatchKind, names: Set<String>?, mask: UInt32,
                          _ state: inout State) -> WatchOutcome {
        if let failWatchesWith { return .failed(Errno(rawValue: failWatchesWith).description) }
        let wd = inotify_add_watch(descriptor, path, mask | UInt32(IN_MASK_ADD))
        if wd < 0 {
            let error = errno
            if error == ENOENT || error == ENOTDIR { return .absent }
            return .failed("inotify_add_watch \(path): " + Errno(rawValue: error).description)
        }
        var registrations = state.watches[wd] ?? []
        if registrations.contains(where: { $0.input == input && $0.names == names && $0.mask & mask == mask }) {
            return .existing
        }
        // Events of this kind were not counted for this input before: what was read may
        // predate the watch.
        registrations.append(Registration(input: input, names: names, mask: mask))
        state.watches[wd] = registrations
        return .new
    }

    /// Reads what the queue holds (non-blocking) and invalidates the inputs it touches.
    private func drain(_ state: inout State) {
        guard descriptor >= 0 else { return }
        let records = state.reader.drain(descriptor)
        guard !records.isEmpty else { return }
        var touched = Set<Input>()
        var ignored: [CInt] = []
        for record in records {
            let (wd, mask, name) = (record.watch, record.mask, record.name)
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                touched.formUnion(Input.allCases)
                continue
            }
            guard let registrations = state.watches[wd] else { continue }
            if mask & UInt32(IN_IGNORED) != 0 {
                ignored.append(wd)
                touched.formUnion(registrations.map(\.input))
                continue
            }
            for registration in registrations where registration.mask & mask != 0 {
                if let names = registration.names, !name.isEmpty, !names.contains(name) { continue }
                touched.insert(registration.input)
            }
        }
        for wd in ignored { state.watches[wd] = nil }
        // A group renamed changes the names a report gives the nodes' owners.
        if touched.contains(.identities) { touched.insert(.devices) }
        for input in touched { Self.bump(input, &state) }
    }

    // MARK: helpers

    /// The nsswitch.conf databases an identity is read from: `passwd` (getpwuid), `group`
    /// (group names, and getgrouplist when there is no `initgroups` line) and `initgroups`
    /// (getgrouplist when the line is there: glibc reads it first, `group` otherwise).
    static let identityDatabases: Set<String> = ["passwd", "group", "initgroups"]

    /// Whether nsswitch.conf's `passwd` and `group` lines, and its `initgroups` line when
    /// there is one, name `files` only (passwd or group absent, or the file unreadable:
    /// glibc's default, which may include other sources, counts as not; so does one of
    /// these names not spelled in lower case, which we cannot be sure glibc reads as we do).
    static func nssOnlyFiles(_ path: String) -> Bool {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return false }
        var seen = Set<String>()
        for line in text.split(separator: "\n") {
            let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let parts = content.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let database = String(parts[0]).trimmingWhitespace()
            guard Self.identityDatabases.contains(database.lowercased()) else { continue }
            if database != database.lowercased() { return false }
            seen.insert(database)
            var sources: [Substring] = []
            var inAction = false
            for word in parts[1].split(whereSeparator: { $0 == " " || $0 == "\t" }) {
                if word.hasPrefix("[") { inAction = true }
                if !inAction { sources.append(word) }
                if word.hasSuffix("]") { inAction = false }
            }
            if sources != ["files"] { return false }
        }
        return seen.isSuperset(of: ["passwd", "group"])
    }

    /// Whether `path` is a socket now (nscd's, when it runs).
    static func isSocket(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK
    }

    /// Whether `path` is a regular file with no other name: not a symlink, one hard link
    /// (with `orAbsent`, not being there at all also counts).
    static func singleName(_ path: String, orAbsent: Bool = false) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return orAbsent && errno == ENOENT }
        return info.st_mode & S_IFMT == S_IFREG && info.st_nlink == 1
    }

    /// Whether the policy files (devaccess.conf, conf.d/*.conf) each have a single name. A
    /// `conf.d` that is a symlink to a directory is fine: its watch follows it, and the
    /// link replaced is an event on the policy directory. Unlistable: not fine.
    private func policyFilesHaveSingleNames() -> Bool {
        guard Self.singleName(policyDirectory + "/" + PolicyFiles.mainFile, orAbsent: true) else { return false }
        let dropIns = policyDirectory + "/" + PolicyFiles.dropInDirectory
        var info = stat()
        guard stat(dropIns, &info) == 0 else { return errno == ENOENT }
        guard let names = try? PolicyFiles.dropInNames(dropIns) else { return false }
        return names.allSatisfy { Self.singleName(dropIns + "/" + $0, orAbsent: true) }
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func base(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
