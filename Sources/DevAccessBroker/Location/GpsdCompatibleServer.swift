import FoundationEssentials
import Dispatch
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEngine

/// gpsd's JSON protocol on loopback TCP, served by devaccessd at each client's grant, so
/// that gpsd's clients (gpspipe, cgps, libgps programs: libgps cannot use a Unix socket)
/// work unchanged when pointed at it while gpsd itself is closed to everyone but
/// devaccessd (config/nftables/devaccess-gpsd.nft).
///
/// A client is whoever the kernel says owns the connecting socket (`TCPSocketOwner`), never
/// what it sends. Its level is looked up when it connects, again whenever the ledger
/// commits or the policy is reloaded (`recheckGrants()`), and every `recheckInterval`
/// while it stays (a grant's time running out writes nothing): a revoked, expired or denied
/// grant, or a switch turned off, ends the connection with gpsd's ERROR report.
///
/// A `devaccess run` given location: while its user has one, each new connection of the
/// user's is looked for in every process's descriptors (`SocketHolders`, by the socket's
/// inode); held by that run's processes alone (its group id, the owner's uid), it is served
/// at the finer of the run's level and the user's own, else at the user's. The run's end
/// takes its level away at the next look, as a revoke does.
///
/// One thread, one poll loop: clients mostly sit watching, a fix a second goes out to all
/// of them, and nobody holds a thread; the source's change wakes the loop. A client that
/// stops reading is dropped when `maxPendingOutput` is waiting for it. One person's
/// commands are answered at up to `commandsPerSecond` across all their connections; the
/// rest wait, unread, in the kernel's buffers.
public final class GpsdCompatibleServer: Sendable {
    /// What the grant lookup says for a uid.
    public enum GrantCheck: Sendable, Hashable {
        case allowed(LocationAccuracy)
        /// Said to the client; the lookup has audited it.
        case refused(String)
    }

    /// What the grant lookup says for a uid: the user's own level and that of each of their
    /// live runs given location (by the run's group id).
    public struct UserLocation: Sendable, Hashable {
        public var user: GrantCheck
        public var runs: [UInt32: LocationAccuracy]
        /// The user's `--strict` runs, ended ones included, by group id: the judge serves them
        /// their own level only (an ended one's leftover processes nothing).
        public var strictRuns: [UInt32: RunScope] = [:]

        public init(user: GrantCheck, runs: [UInt32: LocationAccuracy] = [:]) {
            self.user = user
            self.runs = runs
        }

        /// For a connection held by the processes of run `group` alone (nil: by anyone
        /// else): the run adds its level to the user's, never takes from it; a strict run
        /// gets its own level or nothing (the judge, `Caller.judged`).
        /// For a connection whose holders are `holding` (nil: not looked for, the user had no
        /// runs when it came). One run's alone: as `check(forRun:)`. Shared with a strict run's
        /// process, or held by nobody devaccessd could see (a socket in flight in an
        /// SCM_RIGHTS message while it looked, taken back afterwards) while the user has strict
        /// runs: nothing, since the strict run may be what holds it (hostile review 6: a
        /// strict camera run hid its socket that way and was served its user's location).
        func check(_ holding: SocketHolding?) -> GrantCheck {
            switch holding {
            case .run(let group)?:
                return check(forRun: group)
            case .others(let groups)? where groups.contains(where: { strictRuns[$0] != nil }):
                return .refused("a --strict run's process holds this connection with processes outside the run; "
                    + "connect from the run's processes alone")
            case .unknown? where !strictRuns.isEmpty:
                return .refused("cannot tell which processes hold this connection (none did when devaccessd looked); "
                    + "connect again and keep the socket open")
            case .others?, .unknown?, nil:
                return check(forRun: nil)
            }
        }

        func check(forRun group: UInt32?) -> GrantCheck {
            if let group, var scope = strictRuns[group] {
                scope.accuracy = runs[group]
                // The judge reads only the run here: a TCP client's user is the run's.
                let caller = Caller(principal: Principal(uid: 0, name: "a client of run \(group)"), standing: .user,
                                    run: scope)
                switch caller.judged(.location(nil)) {
                case .refused(let reason): return .refused(reason)
                default: return runs[group].map { .allowed($0) } ?? .refused("no location for this run")
                }
            }
            guard let group, let run = runs[group] else { return user }
            if case .allowed(let level) = user { return .allowed(max(level, run)) }
            return .allowed(run)
        }
    }

    public struct Limits: Sendable, Hashable {
        public var maxClients = 256
        public var maxClientsPerUser = 16
        public var maxPendingOutput = 256 * 1024
        public var recheckInterval: Duration = .seconds(2)
        /// gpsd's clients send a few commands a connection (WATCH, POLL once a second at
        /// most); a flood of POLLs from many connections must not take the loop from others.
        public var commandsPerSecond = 20
        public var commandBurst = 40
        public init() {}
    }

    private let listeners: [TCPListener]
    private let serving: LocationServing
    private let check: @Sendable (UInt32, TCPAddress) async -> UserLocation
    /// Told of a new connection refused on a lookup that did not audit it (while the user
    /// has runs with location, the lookup repeats for the runs' connections and audits none).
    private let refusedUnaudited: @Sendable (UInt32, TCPAddress, String) -> Void
    private let log: BrokerLog
    private let limits: Limits
    private let wake: Int32
    private let stopping = Atomic<Bool>(false)
    /// Set by `recheckGrants()`: every connected uid is looked up again.
    private let recheckRequested = Atomic<Bool>(false)
    private let observation = Mutex<LocationObservation?>(nil)
    /// Grant answers from lookup tasks, for the loop to apply.
    private let answers = Mutex<[(uid: UInt32, check: UserLocation)]>([])
    /// Holder scans' answers (the client's serial, the run whose alone the socket is), for the loop.
    private let identified = Mutex<[(serial: UInt64, uid: UInt32, holding: SocketHolding)]>([])
    /// Whether the loop's thread was started (once).
    private let started = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    public var addresses: [TCPAddress] { listeners.map(\.address) }

    init(listeners: [TCPListener], serving: LocationServing, log: BrokerLog, limits: Limits = Limits(),
         refusedUnaudited: @escaping @Sendable (UInt32, TCPAddress, String) -> Void = { _, _, _ in },
         check: @escaping @Sendable (UInt32, TCPAddress) async -> UserLocation) throws(Errno) {
        self.listeners = listeners
        self.serving = serving
        self.check = check
        self.refusedUnaudited = refusedUnaudited
        self.log = log
        self.limits = limits
        wake = try Socket.makeEventFD()
    }

    deinit { Socket.close(wake) }

    public func start() {
        started.withLock { started in
            guard !started else { return }
            started = true
            DetachedThread.startOrExit(name: "devaccessd gpsd endpoint") { [self] in
                self.run()
                self.finished.signal()
            }
            // Each fix wakes the loop, so it goes out at once rather than at the next timeout.
            observation.withLock { $0 = serving.source.observeChanges { [self] in signalLoop() } }
        }
    }

    /// The grants may have changed (the ledger committed, the policy was reloaded): look
    /// every connected uid up again now, so a revoke ends its connections at once.
    public func recheckGrants() {
        recheckRequested.store(true, ordering: .releasing)
        signalLoop()
    }

    /// Closes every client and returns once the loop has ended.
    public func stop() {
        guard started.withLock({ $0 }), !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        observation.withLock { observation in
            observation?.cancel()
            observation = nil
        }
        signalLoop()
        finished.wait()
    }

    private func signalLoop() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { Glibc.write(wake, $0.baseAddress, 8) }
    }

    // MARK: The loop

    /// Whose level a client is served at.
    private enum Holders: Hashable {
        /// Not known yet: the user has runs with location and the scan has not answered.
        case unknown
        /// Not looked for: the user had no runs when it came (the user's own level).
        case user
        /// What the scan found.
        case scanned(SocketHolding)

        var holding: SocketHolding? {
            if case .scanned(let holding) = self { return holding }
            return nil
        }
    }

    private struct Client {
        var descriptor: Int32
        /// Names the connection for the holder scan's answer (a descriptor is reused).
        var serial: UInt64
        var peer: TCPAddress
        var uid: UInt32
        /// The client's socket (`socket:[INODE]` in its holders' /proc/PID/fd).
        var inode: UInt64
        var holders = Holders.unknown
        /// Whom the per-user cap counts it against (a subordinate uid: its owner).
        var accountable: UInt32
        /// nil until the grant lookup answered; what the client sends meanwhile (gpspipe
        /// sends ?WATCH at once) waits unread in the kernel.
        var session: GpsdSession?
        var output: [UInt8] = []
        /// Close once `output` is sent.
        var closing = false
    }

    private func run() {
        Loop(server: self).run()
    }

    /// The loop's state, owned by its thread: the clients, the grant answers it knows and
    /// the lookups and scans under way. Each turn waits, gathers what the wait and the
    /// lookups brought, and acts on it, one step a function.
    private final class Loop {
        let server: GpsdCompatibleServer
        var clients: [Int32: Client] = [:]
        /// The newest answer per uid: a new connection within `recheckInterval` of it uses
        /// it, so connecting in a loop cannot make a lookup (or an audited refusal) each time.
        var known: [UInt32: (check: UserLocation, at: ContinuousClock.Instant)] = [:]
        var checking: Set<UInt32> = []
        /// Uids with a holder scan under way: one at a time per user, so connecting in a loop
        /// makes devaccessd scan /proc no faster than one scan after another.
        var scanning: Set<UInt32> = []
        var serial: UInt64 = 0
        /// Lookups under way when a recheck was asked: their answers may predate the change.
        var stale: Set<UInt32> = []
        var allowances: [UInt32: CommandAllowance] = [:]

        init(server: GpsdCompatibleServer) { self.server = server }

        func run() {
            defer {
                for client in clients.values { Socket.close(client.descriptor) }
            }
            while !server.stopping.load(ordering: .acquiring) {
                let order = Array(clients.keys)
                let ready = wait(order)
                if ready[0] != 0 {
                    var count: UInt64 = 0
                    _ = withUnsafeMutableBytes(of: &count) { Glibc.read(server.wake, $0.baseAddress, 8) }
                }
                if server.recheckRequested.exchange(false, ordering: .acquiringAndReleasing) {
                    known.removeAll()
                    stale = checking
                }
                let snapshot = server.serving.source.snapshot()
                let now = ContinuousClock.now
                for key in Array(allowances.keys) { allowances[key]?.refill(at: now, server.limits) }
                let listened = ready[1...].prefix(server.listeners.count)
                accept(from: zip(server.listeners, listened).filter { $0.1 != 0 }.map(\.0), now: now)
                serve(zip(order, ready.suffix(order.count)), snapshot: snapshot, now: now)
                takeScans()
                admit(answered: takeAnswers(snapshot: snapshot), snapshot: snapshot)
                lookUpAgain(now: now)
                send(snapshot)
            }
        }

        /// Waits for the wake eventfd, a listener or a client; the events of each, in that
        /// order. New fixes and grant changes wake the loop; the deadline paces the periodic
        /// lookups and waiting commands.
        private func wait(_ order: [Int32]) -> [Int16] {
            let interests = [Poll.Interest.readable(server.wake)]
                + server.listeners.map { .readable($0.descriptor) } + order.map(interest)
            // A failed poll(2) (no memory) is a turn with nothing ready, as a timeout is.
            let ready = try? Poll.wait(interests, until: deadline(order))
            return ready ?? Array(repeating: 0, count: interests.count)
        }

        /// A client is read once its grant is known, and not while its commands wait for
        /// its owner's allowance; written to while output waits.
        private func interest(_ fd: Int32) -> Poll.Interest {
            let waiting = clients[fd]?.session?.hasWaitingCommand == true
            let readable = clients[fd]?.session != nil && !waiting
            return Poll.Interest(fd, events: (readable ? Int16(POLLIN) : 0)
                                     | (clients[fd]?.output.isEmpty == false ? Int16(POLLOUT) : 0))
        }

        /// A quarter second from now, or sooner when a waiting command's allowance comes
        /// (at least a millisecond: a wait never spins).
        private func deadline(_ order: [Int32]) -> ContinuousClock.Instant {
            let now = ContinuousClock.now
            var deadline = now + .milliseconds(250)
            for fd in order {
                guard let client = clients[fd], client.session?.hasWaitingCommand == true,
                      let allowance = allowances[client.accountable] else { continue }
                deadline = min(deadline, allowance.next(server.limits))
            }
            return max(deadline, now + .milliseconds(1))
        }

        /// Takes the new connections and looks their uids up unless a recent answer stands.
        private func accept(from listeners: [TCPListener], now: ContinuousClock.Instant) {
            for listener in listeners {
                for fd in server.acceptAll(listener, into: &clients, serial: &serial) {
                    guard let client = clients[fd] else { continue }
                    if let answer = known[client.uid], now - answer.at < server.limits.recheckInterval { continue }
                    if !checking.contains(client.uid) {
                        server.lookUp(client.uid, peer: client.peer, checking: &checking)
                    }
                }
            }
        }

        /// Reads and answers the clients with something to read, and the commands that
        /// waited for their owner's allowance.
        private func serve(_ ready: some Sequence<(Int32, Int16)>, snapshot: LocationSnapshot,
                           now: ContinuousClock.Instant) {
            for (fd, events) in ready {
                guard var client = clients[fd] else { continue }
                var allowance = allowances[client.accountable, default: CommandAllowance(server.limits, at: now)]
                defer { allowances[client.accountable] = allowance }
                if client.session?.hasWaitingCommand != false, !client.closing {
                    // Not read while its grant or its commands wait; hung up meanwhile:
                    // nobody to answer.
                    guard events & Int16(POLLHUP | POLLERR) == 0 else {
                        drop(client)
                        continue
                    }
                    server.answerWaiting(&client, snapshot: snapshot, allowance: &allowance.available)
                } else if events & Int16(POLLIN | POLLHUP | POLLERR) != 0, !client.closing {
                    guard server.read(&client, snapshot: snapshot, allowance: &allowance.available) else {
                        drop(client)
                        continue
                    }
                }
                clients[fd] = client
            }
        }

        /// Holder scans' answers: whose level each scanned client gets.
        private func takeScans() {
            for reply in server.identified.withLock({ answers in defer { answers.removeAll() }; return answers }) {
                scanning.remove(reply.uid)
                guard let fd = clients.first(where: { $0.value.serial == reply.serial })?.key else { continue }
                clients[fd]?.holders = .scanned(reply.holding)
            }
        }

        /// Grant answers: start, re-level or end the uid's clients; the uids answered.
        private func takeAnswers(snapshot: LocationSnapshot) -> Set<UInt32> {
            var answered: Set<UInt32> = []
            for reply in server.answers.withLock({ answers in defer { answers.removeAll() }; return answers }) {
                checking.remove(reply.uid)
                answered.insert(reply.uid)
                if stale.remove(reply.uid) == nil { known[reply.uid] = (reply.check, .now) }
                for (fd, var client) in clients where client.uid == reply.uid && !client.closing
                    && client.holders != .unknown {
                    server.apply(reply.check.check(client.holders.holding), to: &client, snapshot: snapshot)
                    clients[fd] = client
                }
            }
            return answered
        }

        /// New clients: served once the uid's answer is known and, while the user has runs
        /// with location or strict runs, once the scan says who holds the socket.
        private func admit(answered: Set<UInt32>, snapshot: LocationSnapshot) {
            for (fd, var client) in clients where client.session == nil && !client.closing {
                guard let answer = known[client.uid]?.check else { continue }
                if client.holders == .unknown {
                    if answer.runs.isEmpty && answer.strictRuns.isEmpty {
                        client.holders = .user
                    } else {
                        if !scanning.contains(client.uid) { server.scan(client, scanning: &scanning) }
                        continue
                    }
                } else if answered.contains(client.uid) {
                    continue
                }
                let decided = answer.check(client.holders.holding)
                if case .refused(let reason) = decided, !answer.runs.isEmpty || !answer.strictRuns.isEmpty {
                    server.refusedUnaudited(client.uid, client.peer, reason)
                }
                server.apply(decided, to: &client, snapshot: snapshot)
                clients[fd] = client
            }
        }

        /// Every uid still connected is looked up again now and then; answers and
        /// allowances nobody needs any more go.
        private func lookUpAgain(now: ContinuousClock.Instant) {
            let limits = server.limits
            let connected = Set(clients.values.map(\.uid))
            for uid in connected where !checking.contains(uid) {
                if let answer = known[uid], now - answer.at < limits.recheckInterval { continue }
                server.lookUp(uid, peer: clients.values.first { $0.uid == uid }?.peer, checking: &checking)
            }
            known = known.filter { now - $0.value.at < limits.recheckInterval || connected.contains($0.key) }
            let owners = Set(clients.values.map(\.accountable))
            allowances = allowances.filter { owners.contains($0.key) || $0.value.available < limits.commandBurst }
        }

        /// New fixes to watchers, then everything waiting goes out. The reports are the
        /// same bytes for every client at a level (one blur per receiver for everyone), so
        /// they are made once per level.
        private func send(_ snapshot: LocationSnapshot) {
            var encoded: [LocationAccuracy: [UInt8]] = [:]
            let serving = server.serving
            for fd in Array(clients.keys) {
                guard var client = clients[fd] else { continue }
                if var session = client.session, !client.closing {
                    client.output += session.update(snapshot) { level in
                        if let bytes = encoded[level] { return bytes }
                        let bytes = GpsdSession.reports(snapshot, level: level) { serving.serve($0, at: level) }
                        encoded[level] = bytes
                        return bytes
                    }
                    client.session = session
                }
                guard server.flush(&client) else {
                    drop(client)
                    continue
                }
                if client.closing && client.output.isEmpty {
                    drop(client)
                    continue
                }
                clients[fd] = client
            }
        }

        private func drop(_ client: Client) {
            Socket.close(client.descriptor)
            clients[client.descriptor] = nil
        }
    }

    private func apply(_ check: GrantCheck, to client: inout Client, snapshot: LocationSnapshot) {
        switch check {
        case .allowed(let level):
            serving.source.start()
            if client.session == nil {
                client.session = GpsdSession(level: level)
                client.output += GpsdSession.banner(snapshot)
            } else {
                client.session?.level = level
            }
        case .refused(let reason):
            client.output += GpsdSession.error("devaccessd: " + reason)
            client.closing = true
        }
    }

    /// Takes every waiting connection; returns the new clients' descriptors.
    private func acceptAll(_ listener: TCPListener, into clients: inout [Int32: Client], serial: inout UInt64) -> [Int32] {
        var new: [Int32] = []
        // At most a listen backlog's worth a turn: connecting in a flood cannot keep the loop
        // accepting while the clients it has wait; the rest are taken next turn.
        for _ in 0..<TCPListener.defaultBacklog {
            let accepted: AcceptedTCP
            do {
                guard let next = try listener.accept() else { return new }
                accepted = next
            } catch {
                log.warning("gpsd endpoint: accept failed", ["address": listener.address.description,
                                                             "error": error.description])
                return new
            }
            let owner: TCPSocketOwner.Identity
            do {
                // A client the gpsd rule redirected from gpsd's port is known by the
                // address it dialled.
                owner = try Self.owner(of: accepted)
            } catch {
                // Gone already, or not a socket of this machine's: nobody to serve.
                log.info("gpsd endpoint: cannot tell who connected", ["peer": accepted.peer.description,
                                                                      "error": error.description])
                var refusal = GpsdSession.error("devaccessd: cannot tell who connected (\(error)); connect again")
                _ = refusal.withUnsafeMutableBytes { Socket.send(accepted.descriptor, UnsafeRawBufferPointer($0)) }
                Socket.close(accepted.descriptor)
                continue
            }
            let uid = owner.uid
            let accountable = SubordinateIDs.accountable(uid)
            let theirs = clients.values.filter { $0.accountable == accountable }.count
            guard clients.count < limits.maxClients, theirs < limits.maxClientsPerUser else {
                var refusal = GpsdSession.error(clients.count >= limits.maxClients
                    ? "devaccessd: too many location clients; try again later"
                    : "devaccessd: uid \(uid) has \(theirs) location clients open already")
                _ = refusal.withUnsafeMutableBytes { Socket.send(accepted.descriptor, UnsafeRawBufferPointer($0)) }
                Socket.close(accepted.descriptor)
                continue
            }
            serial += 1
            clients[accepted.descriptor] = Client(descriptor: accepted.descriptor, serial: serial, peer: accepted.peer,
                                                  uid: uid, inode: owner.inode, accountable: accountable)
            new.append(accepted.descriptor)
        }
        return new
    }

    /// Who owns the client's socket. A redirected client is looked up at the port it came
    /// from as we see it and the address it dialled; conntrack rewrites that port when the
    /// redirected connection would clash with one it tracks already (the client can make
    /// it: a second socket on its port, connected here directly), and the socket found
    /// there is then another's that dialled gpsd itself. Such a socket reached gpsd (its
    /// end there is found the other way round), or is root's: the rule redirects nobody
    /// else's (config/nftables/devaccess-gpsd.nft).
    static func owner(of accepted: AcceptedTCP) throws(Errno) -> TCPSocketOwner.Identity {
        let owner = try TCPSocketOwner.identity(of: accepted.peer, connectedTo: accepted.dialled)
        guard let dialled = accepted.redirectedFrom else { return owner }
        guard owner.uid != 0, (try? TCPSocketOwner.uid(of: dialled, connectedTo: accepted.peer)) == nil else {
            throw Errno(rawValue: ENOENT)
        }
        return owner
    }

    /// Looks for the processes that hold the client's socket, off the loop (a pass over
    /// /proc): the kernel's answer, never the client's word. Held by one run's processes
    /// alone, the client gets that run's level.
    private func scan(_ client: Client, scanning: inout Set<UInt32>) {
        scanning.insert(client.uid)
        let (serial, uid, inode) = (client.serial, client.uid, client.inode)
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            // Inode 0: the client closed its socket already; nobody to name.
            let holding = inode == 0 ? SocketHolding.unknown : SocketHolders.scan(inode: inode).holding(uid: uid)
            identified.withLock { $0.append((serial, uid, holding)) }
            signalLoop()
        }
    }

    private func lookUp(_ uid: UInt32, peer: TCPAddress?, checking: inout Set<UInt32>) {
        guard let peer else { return }
        checking.insert(uid)
        let check = self.check
        Task { [self] in
            let answer = await check(uid, peer)
            answers.withLock { $0.append((uid, answer)) }
            signalLoop()
        }
    }

    /// Reads what the client sent and answers it; false: the client is gone or broke the protocol.
    private func read(_ client: inout Client, snapshot: LocationSnapshot, allowance: inout Int) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let received = valueOrErrno {
            buffer.withUnsafeMutableBytes { Glibc.recv(client.descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        }
        switch received {
        case .success(0): return false
        case .success(let count):
            answer(&client, buffer.prefix(count), snapshot: snapshot, allowance: &allowance)
            return true
        case .failure(let error): return error == .wouldBlock
        }
    }

    private func answer(_ client: inout Client, _ bytes: some Collection<UInt8>, snapshot: LocationSnapshot,
                        allowance: inout Int) {
        guard var session = client.session, !bytes.isEmpty else { return }
        let level = session.level
        do {
            client.output += try session.receive(bytes, snapshot: snapshot, allowance: &allowance) {
                serving.serve($0, at: level)
            }
        } catch {
            client.output += GpsdSession.error("devaccessd: a command longer than \(GpsdSession.maxCommand) bytes")
            client.closing = true
        }
        client.session = session
    }

    private func answerWaiting(_ client: inout Client, snapshot: LocationSnapshot, allowance: inout Int) {
        guard var session = client.session else { return }
        let level = session.level
        client.output += session.answerWaiting(snapshot: snapshot, allowance: &allowance) { serving.serve($0, at: level) }
        client.session = session
    }

    /// Sends what waits; false when the client is gone or has let too much pile up.
    private func flush(_ client: inout Client) -> Bool {
        guard !client.output.isEmpty else { return true }
        let sent = client.output.withUnsafeBytes { Socket.send(client.descriptor, $0) }
        switch sent {
        case .success(let count): client.output.removeFirst(count)
        case .failure: return false
        }
        return client.output.count <= limits.maxPendingOutput
    }
}

/// One person's commands to the endpoint: `commandBurst` at once, then `commandsPerSecond`.
struct CommandAllowance {
    var available: Int
    /// When the next command was last earned (or, when full, last looked at).
    private var since: ContinuousClock.Instant

    init(_ limits: GpsdCompatibleServer.Limits, at now: ContinuousClock.Instant) {
        available = limits.commandBurst
        since = now
    }

    private static func interval(_ limits: GpsdCompatibleServer.Limits) -> Duration {
        .seconds(1) / max(1, limits.commandsPerSecond)
    }

    mutating func refill(at now: ContinuousClock.Instant, _ limits: GpsdCompatibleServer.Limits) {
        guard available < limits.commandBurst else {
            since = now
            return
        }
        let interval = Self.interval(limits)
        let earned = Int((now - since) / interval)
        guard earned > 0 else { return }
        available = min(limits.commandBurst, available + earned)
        since = available == limits.commandBurst ? now : since + interval * earned
    }

    /// When the next command is earned.
    func next(_ limits: GpsdCompatibleServer.Limits) -> ContinuousClock.Instant {
        since + Self.interval(limits)
    }
}
