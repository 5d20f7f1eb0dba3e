import Glibc
import CSystemd
import Synchronization
import CLinux
import DevAccessSystem
import DevAccessProtocol
import DevAccessInterface

/// Answers one decoded request from one peer. Runs on the server's handler threads,
/// never on the event loop, so slow work (probes, NSS, the ledger) cannot stall I/O.
public protocol RequestHandler: Sendable {
    func handle(_ request: RequestEnvelope, from peer: Peer) async -> Reply

    /// Starts answering on the event loop thread and must not block; finishes
    /// `exchange` exactly once, from any thread, after any interim replies (prompts).
    /// The default runs `handle` as a task on `executor` (the handler threads); a
    /// handler may answer some requests without that hop.
    func start(_ request: RequestEnvelope, from peer: Peer, executor: any TaskExecutor, exchange: Exchange)

    /// Root and administrators: not held to the per-user connection limit, and served from
    /// the slots kept for them when everyone else's are taken. The default: root only.
    func isPrivileged(_ peer: Peer) -> Bool

    /// SIGHUP: read the configuration again (on the event loop thread: keep it short).
    func reload()
}

extension RequestHandler {
    public func reload() {}

    public func isPrivileged(_ peer: Peer) -> Bool { peer.uid == 0 }

    public func start(_ request: RequestEnvelope, from peer: Peer, executor: any TaskExecutor, exchange: Exchange) {
        Task(executorPreference: executor) { exchange.finish(await handle(request, from: peer)) }
    }
}

/// The broker's transport: one thread runs a `poll(2)` loop that accepts, reads,
/// frames, decodes and writes for every connection; each decoded request becomes a
/// task on the handler threads (`HandlerExecutor`), and its reply comes back through a
/// mailbox that wakes the loop (eventfd); a reply the loop's own thread posts (a status
/// answered inline) is drained before the next poll, with no wake-up.
///
/// Per connection, requests are answered one at a time and in order. A request may
/// hold a conversation (`Exchange`): interim replies, and the client's answers read by
/// the loop and handed back to the handler, so a prompt waiting for a person holds no
/// thread. Anything that
/// breaks the protocol gets an error frame, then the connection closes; the loop
/// itself never throws after start and never trusts a length, an id or a byte.
public final class BrokerServer: Sendable {
    public struct Limits: Sendable {
        /// Connections served at once; more are answered `busy` and closed.
        public var maxConnections: Int
        /// Connections one user (uid) may hold at once, unless privileged: one user cannot
        /// take every slot.
        public var maxConnectionsPerUser: Int
        /// Of `maxConnections`, the slots only root and administrators may take, so they
        /// can still act (revoke, reconcile) while everyone else's slots are in use.
        public var reservedConnections: Int
        /// A connection with no request in flight and no traffic for this long is
        /// closed (with a `timeout` error if a message was half sent).
        public var idleTimeout: Duration
        /// How long shutdown waits for in-flight requests to be answered.
        public var shutdownGrace: Duration
        /// How long a closing connection keeps reading (and discarding) so its peer
        /// reads the last reply before end of stream.
        public var linger: Duration
        /// Threads that run request handlers (probes have their own).
        public var handlerThreads: Int
        /// A user at `maxConnectionsPerUser` who connects again gets a slot by closing their
        /// own connection that has been idle longest (nothing in flight, half read or unsent),
        /// if it has been idle this long; otherwise the new connection is turned away.
        public var evictableAfter: Duration = .seconds(5)
        /// A message must be complete (its newline) this long after its first byte arrived,
        /// or the connection is closed with `timeout`: a client that dribbles a byte now and
        /// then is never idle, and would otherwise hold its slot forever.
        public var messageTimeout: Duration = .seconds(10)

        public init(maxConnections: Int = 1024, maxConnectionsPerUser: Int = 256, reservedConnections: Int = 64,
                    idleTimeout: Duration = .seconds(60), shutdownGrace: Duration = .seconds(2),
                    linger: Duration = .seconds(1), handlerThreads: Int = 4) {
            self.maxConnections = maxConnections
            self.maxConnectionsPerUser = maxConnectionsPerUser
            self.reservedConnections = min(reservedConnections, maxConnections)
            self.idleTimeout = idleTimeout
            self.shutdownGrace = shutdownGrace
            self.linger = linger
            self.handlerThreads = handlerThreads
        }
    }

    public let socketPath: String
    public let limits: Limits
    private let handler: any RequestHandler
    private let executor: HandlerExecutor
    private let log: BrokerLog
    private let listenerDescriptor: CInt
    private let wakeDescriptor: CInt
    /// The eventfd, owned here: closed when the server goes (tasks still answering may wake it until then).
    private let wakeOwner: FileDescriptor
    private let mailbox = Mutex<Mailbox>(Mailbox())
    /// The thread running the loop (pthread_self; 0 before `run`): what it posts itself
    /// (a status answered from kept inputs, inline) needs no wake-up, it is drained before
    /// the loop polls again.
    private let loopThread = Atomic<UInt>(0)
    // The listener is used only by the loop thread; kept here to close it on stop.
    private let listenerBox: ListenerBox

    struct Mailbox {
        var completions: [Completion] = []
        var stopRequested = false
        var stopReason = ""
    }

    /// A reply line from a handler, for the loop to write.
    struct Completion {
        var connection: UInt64
        var serial: UInt64
        var line: [UInt8]
        /// The request's last reply: the connection goes on to the next request.
        var final: Bool
        /// An interim reply after which the client's next message is the answer.
        var awaitingAnswer: Bool
        /// `run-started`: from now on the client's messages are `run-signal`s of the run.
        var relaysSignals = false
        /// A subscription's `update`: a client that leaves them unread is closed rather
        /// than buffered for without bound.
        var update = false
        /// Passed with the line's first byte (an `open`'s node); closed if never sent.
        var descriptor: CInt?
    }

    /// Binds the socket now (so a caller can report readiness once this returns);
    /// `run()` serves it.
    public init(socketPath: String, handler: any RequestHandler, log: BrokerLog, limits: Limits = Limits()) throws(ListenError) {
        let listener = try Listener(path: socketPath)
        let wake: CInt
        do {
            wake = try Socket.makeEventFD()
        } catch {
            listener.close()
            throw ListenError(path: socketPath, problem: "eventfd(): \(error)")
        }
        self.socketPath = socketPath
        self.limits = limits
        self.handler = handler
        executor = HandlerExecutor(threads: limits.handlerThreads)
        self.log = log
        listenerDescriptor = listener.descriptor
        wakeDescriptor = wake
        wakeOwner = FileDescriptor(owning: wake)
        listenerBox = ListenerBox(listener)
    }

    /// Asks `run()` to stop: stop accepting, remove the socket, answer what is in
    /// flight (up to `shutdownGrace`), close everything, return. Any thread.
    public func stop(reason: String = "stop requested") {
        mailbox.withLock {
            $0.stopRequested = true
            $0.stopReason = reason
        }
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
    }

    func post(_ exchange: Exchange, _ line: [UInt8], final: Bool, awaitingAnswer: Bool, relaysSignals: Bool = false,
              update: Bool = false, descriptor: CInt? = nil) {
        let completion = Completion(connection: exchange.connection, serial: exchange.serial, line: line, final: final,
                                    awaitingAnswer: awaitingAnswer || relaysSignals, relaysSignals: relaysSignals,
                                    update: update, descriptor: descriptor)
        mailbox.withLock { $0.completions.append(completion) }
        if loopThread.load(ordering: .relaxed) != UInt(pthread_self()) { wake() }
    }

    fileprivate var hasCompletions: Bool { mailbox.withLock { !$0.completions.isEmpty } }

    /// Makes the next poll return at once (replies are waiting).
    fileprivate func wakeLoop() { wake() }

    /// Serves until `stop()` or until `signalDescriptor` (a signalfd) becomes readable.
    /// `onStopping` runs once when shutdown begins (sd_notify STOPPING=1).
    public func run(signalDescriptor: CInt? = nil, onStopping: () -> Void = {}) {
        loopThread.store(UInt(pthread_self()), ordering: .relaxed)
        defer { loopThread.store(0, ordering: .relaxed) }
        var loop = EventLoop(server: self, signalDescriptor: signalDescriptor)
        loop.run(onStopping: onStopping)
    }

    deinit {
        // Only now: tasks still answering hold the server and may post until they end
        // (the eventfd, `wakeOwner`, closes with the server).
        listenerBox.close()
    }

    // MARK: - The loop (confined to the thread that called run())

    private struct EventLoop {
        /// Rounds of inline-posted replies served before the loop polls again.
        static let inlineRounds = 4

        let server: BrokerServer
        let signalDescriptor: CInt?
        var connections: [UInt64: Connection] = [:]
        /// Open connections per uid (the per-user limit).
        var perUser: [UInt32: Int] = [:]
        /// When a uid was last turned away (to log a flood once, not per connection).
        var lastTurnedAway: [UInt32: ContinuousClock.Instant] = [:]
        /// When a uid's idle connection was last closed for a new one (logged once a burst).
        var lastEvicted: [UInt32: ContinuousClock.Instant] = [:]
        var nextID: UInt64 = 1
        var stopping = false
        var stopDeadline: ContinuousClock.Instant?
        var acceptPausedUntil: ContinuousClock.Instant?
        var lastSweep = ContinuousClock.now
        var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
        var log: BrokerLog { server.log }

        init(server: BrokerServer, signalDescriptor: CInt?) {
            self.server = server
            self.signalDescriptor = signalDescriptor
        }

        mutating func run(onStopping: () -> Void) {
            var interests: [Poll.Interest] = []
            var owners: [Connection?] = []
            while true {
                let now = ContinuousClock.now
                if stopping && (connections.isEmpty || stopDeadline.map { now >= $0 } ?? true) { break }

                interests.removeAll(keepingCapacity: true)
                owners.removeAll(keepingCapacity: true)
                interests.append(.readable(server.wakeDescriptor))
                owners.append(nil)
                if let signalDescriptor, !stopping {
                    interests.append(.readable(signalDescriptor))
                    owners.append(nil)
                }
                if let until = acceptPausedUntil, now >= until { acceptPausedUntil = nil }
                if !stopping && acceptPausedUntil == nil {
                    interests.append(.readable(server.listenerDescriptor))
                    owners.append(nil)
                }
                for connection in connections.values {
                    interests.append(Poll.Interest(connection.descriptor, events: connection.pollEvents))
                    owners.append(connection)
                }

                let revents: [Int16]
                do throws(SystemCallError) {
                    revents = try Poll.wait(interests, until: now + .milliseconds(250)) ?? []
                } catch {
                    log.error("poll failed; stopping", ["error": error.errno.description])
                    break
                }
                for index in revents.indices where revents[index] != 0 {
                    let fd = interests[index].descriptor
                    if let connection = owners[index] {
                        service(connection, revents: revents[index])
                    } else if fd == server.wakeDescriptor {
                        drainMailbox(onStopping: onStopping)
                    } else if fd == signalDescriptor {
                        readSignal(onStopping: onStopping)
                    } else if fd == server.listenerDescriptor {
                        acceptAll()
                    }
                }
                // Replies the loop posted itself while serving (no wake-up was written): a few
                // rounds here, then back to poll with a wake-up for the rest, so one client's
                // pipelined requests, each answered inline and freeing the next, cannot keep
                // the loop from accepting and reading everyone else.
                var rounds = 0
                while server.hasCompletions && rounds < Self.inlineRounds {
                    drainMailbox(onStopping: onStopping)
                    rounds += 1
                }
                if server.hasCompletions { server.wakeLoop() }
                sweep()
            }
            if !stopping { beginStop(reason: "event loop failed", onStopping: onStopping) }
            for connection in Array(connections.values) { close(connection) }
        }

        // MARK: accept

        mutating func acceptAll() {
            while true {
                let accepted = valueOrErrno {
                    accept4(server.listenerDescriptor, nil, nil, CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue))
                }
                let error: Errno
                switch accepted {
                case .success(let fd):
                    admit(fd)
                    continue
                case .failure(let failure):
                    error = failure
                }
                switch error.rawValue {
                case EAGAIN:
                    return
                case ECONNABORTED, EPROTO:
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    log.warning("cannot accept more connections now; pausing accept for 100 ms",
                                ["error": error.description, "connections": String(connections.count)])
                    acceptPausedUntil = ContinuousClock.now + .milliseconds(100)
                    return
                default:
                    log.error("accept failed", ["error": error.description])
                    return
                }
            }
        }

        mutating func admit(_ fd: CInt) {
            // Closed on every way out that does not hand it to its connection.
            let socket = FileDescriptor(owning: fd)
            let peer: Peer
            switch Peer.identify(socket: fd) {
            case .success(let identified):
                peer = identified
            case .failure(let error):
                log.warning("connection without peer credentials refused", ["error": error.description])
                return
            }
            if (perUser[peer.accountable] ?? 0) >= server.limits.maxConnectionsPerUser
                && connections.count < server.limits.maxConnections, let idle = idlest(of: peer.uid) {
                // The user's own idle connection makes room (asked only at the limit: NSS lookup).
                if !server.handler.isPrivileged(peer) {
                    if lastEvicted[peer.accountable].map({ ContinuousClock.now - $0 > .seconds(10) }) ?? true {
                        log.info("closing a user's idlest connection for a new one", [
                            "uid": String(peer.uid), "pid": String(peer.pid),
                            "idle_sec": String((ContinuousClock.now - idle.lastActivity).components.seconds)])
                    }
                    if lastEvicted.count > 4096 { lastEvicted.removeAll() }
                    lastEvicted[peer.accountable] = ContinuousClock.now
                    close(idle)
                }
            }
            if let refusal = turnAway(peer) {
                // Logged once per uid per burst, not per connection: a flood must not flood the log.
                if lastTurnedAway[peer.accountable].map({ ContinuousClock.now - $0 > .seconds(10) }) ?? true {
                    log.warning("turning clients away", ["reason": refusal, "uid": String(peer.uid),
                                                          "pid": String(peer.pid),
                                                          "connections": String(connections.count)])
                }
                if lastTurnedAway.count > 4096 { lastTurnedAway.removeAll() }
                lastTurnedAway[peer.accountable] = ContinuousClock.now
                var line = MessageCodec.encode(ReplyEnvelope(id: 0, reply: .error(ProtocolError(
                    .busy, context: "connection", reason: refusal))))
                line.append(0x0a)
                _ = line.withUnsafeBytes { Socket.send(fd, $0) }
                return
            }
            let connection = Connection(id: nextID, socket: socket, peer: peer, now: ContinuousClock.now)
            nextID += 1
            connections[connection.id] = connection
            perUser[peer.accountable, default: 0] += 1
            if log.isEnabled(.debug) {
                log.debug("client connected", ["connection": String(connection.id), "uid": String(peer.uid),
                                                "pid": String(peer.pid), "program": peer.program ?? "-"])
            }
        }

        // MARK: per connection

        mutating func service(_ connection: Connection, revents: Int16) {
            guard connections[connection.id] != nil else { return }
            // POLLHUP: both directions are shut (the peer closed its socket), so nobody
            // can read a reply any more. A peer that only shut down its sending side
            // (and waits for replies) shows as readable end-of-stream instead.
            if revents & (Int16(POLLNVAL) | Int16(POLLERR) | Int16(POLLHUP)) != 0 {
                close(connection)
                return
            }
            if revents & Int16(POLLOUT) != 0 {
                let wasFull = connection.outboxFull
                flush(connection)
                guard connections[connection.id] != nil else { return }
                // Messages that waited for the client to read its replies go on now.
                if wasFull && !connection.outboxFull { process(connection) }
                guard connections[connection.id] != nil else { return }
            }
            if revents & Int16(POLLIN) != 0 {
                read(connection)
            }
        }

        mutating func read(_ connection: Connection) {
            var passed = [CInt](repeating: -1, count: Int(DEVACCESS_MAX_PASSED_FDS))
            var passedCount: CInt = 0
            var truncated: CInt = 0
            let outcome = valueOrErrno {
                readBuffer.withUnsafeMutableBytes { raw in
                    devaccess_recv_with_fds(connection.descriptor, raw.baseAddress, raw.count, 0, &passed, &passedCount,
                                            &truncated)
                }
            }
            if passedCount > 0 {
                connection.receivedDescriptors.adopt(passed.prefix(Int(passedCount)))
            }
            if truncated != 0 || connection.receivedDescriptors.count > RunOrder.descriptorCount {
                // More descriptors than any message carries: not a client of this protocol.
                connection.closeReceivedDescriptors()
                reject(connection, id: 0, ProtocolError(.badMessage, context: "descriptors",
                    reason: "more than \(RunOrder.descriptorCount) file descriptors were sent; only 'run' carries "
                        + "descriptors (stdin, stdout, stderr)"), forceClose: true)
                return
            }
            let received: Int
            switch outcome {
            case .success(let count):
                received = count
            case .failure(let error) where error == .wouldBlock:
                return
            case .failure:
                // ECONNRESET and friends: the peer is gone; nobody is left to answer.
                close(connection)
                return
            }
            connection.lastActivity = ContinuousClock.now
            if case .lingering(let until, let discarded) = connection.phase {
                if received == 0 || discarded + received > 1 << 20 {
                    close(connection)
                } else {
                    connection.phase = .lingering(until: until, discarded: discarded + received)
                }
                return
            }
            guard connection.isOpen else { return }
            if received == 0 {
                connection.readEOF = true
            } else {
                readBuffer.withUnsafeBytes { raw in
                    connection.framer.append(UnsafeRawBufferPointer(rebasing: raw[0..<received]))
                }
            }
            process(connection)
        }

        /// Takes complete messages off the connection's buffer while no request is in flight,
        /// or while the request in flight awaits its client's answer.
        mutating func process(_ connection: Connection) {
            // Not while a client leaves its replies unread: buffered requests would otherwise
            // each add a reply to an outbox nobody drains (memory without bound).
            while connection.isOpen && !connection.outboxFull && (!connection.inFlight || connection.awaitingAnswer) {
                switch connection.framer.next() {
                case .line(let line):
                    connection.partialSince = nil
                    if connection.inFlight {
                        answer(line, on: connection)
                    } else {
                        dispatch(line, on: connection)
                    }
                case .tooLarge:
                    reject(connection, id: 0, ProtocolError(.tooLarge, context: "message",
                        reason: "more than \(BrokerProtocol.maxRequestSize) bytes arrived without a newline; "
                            + "a message is at most \(BrokerProtocol.maxRequestSize) bytes"))
                case .needMore:
                    connection.partialSince = connection.framer.pendingByteCount > 0
                        ? connection.partialSince ?? ContinuousClock.now : nil
                    if connection.readEOF {
                        if connection.awaitingAnswer {
                            // The answer can never come; the request ends without one.
                            connection.awaitingAnswer = false
                            connection.exchange?.depart(.endOfStream)
                        }
                        if connection.framer.pendingByteCount > 0 {
                            reject(connection, id: 0, ProtocolError(.truncated, context: "message",
                                reason: "the connection ended after \(connection.framer.pendingByteCount) bytes "
                                    + "of a message that had no newline"))
                        } else {
                            connection.phase = .closing
                        }
                    }
                    settle(connection)
                    return
                }
            }
            settle(connection)
        }

        mutating func dispatch(_ line: [UInt8], on connection: Connection) {
            let envelope: RequestEnvelope
            // The common status request is recognised without a JSON tree; anything else
            // (and anything odd) goes through the full decoder.
            if let status = MessageCodec.decodeStatusRequest(line) {
                envelope = status
            } else {
                do {
                    envelope = try MessageCodec.decodeRequest(line)
                } catch {
                    reject(connection, id: error.id, version: error.version, error.error)
                    return
                }
            }
            // Descriptors belong to a `run`, which takes exactly three; any other message
            // that brought some is refused (and they are closed).
            var descriptors = FileDescriptors()
            if case .run = envelope.request {
                guard connection.receivedDescriptors.count == RunOrder.descriptorCount else {
                    connection.closeReceivedDescriptors()
                    reject(connection, id: envelope.id, version: envelope.version, ProtocolError(
                        .badMessage, context: "descriptors",
                        reason: "'run' carries exactly \(RunOrder.descriptorCount) file descriptors (stdin, stdout, "
                            + "stderr) with its first byte; nothing was run"), forceClose: true)
                    return
                }
                descriptors = connection.receivedDescriptors.take()
            } else if !connection.receivedDescriptors.isEmpty {
                connection.closeReceivedDescriptors()
                reject(connection, id: envelope.id, version: envelope.version, ProtocolError(
                    .badMessage, context: "descriptors",
                    reason: "only 'run' carries file descriptors; a '\(envelope.request.type)' came with some"),
                    forceClose: true)
                return
            }
            if case .runSignal = envelope.request {
                reject(connection, id: envelope.id, version: envelope.version, ProtocolError(
                    .badMessage, context: "$.type", reason: "no program of this connection is running"),
                    forceClose: true)
                return
            }
            if case .promptAnswer = envelope.request {
                // Valid only while its request waits for it (see `answer`).
                reject(connection, id: envelope.id, version: envelope.version, ProtocolError(
                    .badMessage, context: "$.type",
                    reason: "no prompt is waiting for an answer on this connection"), forceClose: true)
                return
            }
            connection.inFlight = true
            connection.exchangeSerial += 1
            let exchange = Exchange(server: server, connection: connection.id, serial: connection.exchangeSerial,
                                    request: envelope)
            connection.exchange = exchange
            if !descriptors.isEmpty { exchange.attach(descriptors) }
            server.handler.start(envelope, from: connection.peer, executor: server.executor, exchange: exchange)
        }

        /// The client's message while its request awaits an answer: it must be that
        /// request's `prompt-answer`. Anything else breaks the conversation: the request
        /// ends without an answer and the connection is closed.
        mutating func answer(_ line: [UInt8], on connection: Connection) {
            guard let exchange = connection.exchange else { return }
            let envelope: RequestEnvelope
            do {
                envelope = try MessageCodec.decodeRequest(line)
            } catch {
                reject(connection, id: error.id, version: error.version, error.error, forceClose: true)
                return
            }
            if connection.relayingSignals, envelope.id == exchange.request.id, case .runSignal(let signal) = envelope.request {
                exchange.deliver(signal: signal.signal)
                return
            }
            guard envelope.id == exchange.request.id, case .promptAnswer(let answer) = envelope.request else {
                reject(connection, id: envelope.id, version: envelope.version, ProtocolError(
                    .badMessage, context: "$",
                    reason: "request \(exchange.request.id) waits for the answer to its prompt; a '\(envelope.request.type)' "
                        + "message with id \(envelope.id) cannot come before it"), forceClose: true)
                return
            }
            connection.awaitingAnswer = false
            exchange.deliver(answer)
        }

        mutating func reject(_ connection: Connection, id: Int64, version: Int64 = BrokerProtocol.version,
                             _ error: ProtocolError, forceClose: Bool = false) {
            let peer = connection.peer
            log.info("rejected a message", ["code": error.code.rawValue, "context": error.context, "reason": error.reason,
                                            "uid": String(peer.uid), "pid": String(peer.pid),
                                            "program": peer.program ?? "-"])
            connection.enqueue(MessageCodec.encode(ReplyEnvelope(id: id, reply: .error(error), version: version)))
            if error.code.closesConnection || forceClose {
                // A request still in flight gets no more answers: its replies are dropped.
                detachExchange(connection, .badMessage)
                connection.phase = .closing
            }
            flush(connection)
        }

        /// Ends the connection's part in its request: the handler hears that the client is
        /// gone and whatever it still sends is dropped.
        mutating func detachExchange(_ connection: Connection, _ departure: Exchange.Departure) {
            guard let exchange = connection.exchange else { return }
            connection.exchange = nil
            connection.inFlight = false
            connection.awaitingAnswer = false
            connection.relayingSignals = false
            exchange.depart(departure)
        }

        mutating func flush(_ connection: Connection) {
            while connection.hasOutput {
                // A descriptor goes with the first byte of its reply: send up to that byte
                // plainly, then that byte alone with the descriptor.
                let position = connection.outgoingPositions.first
                let result: Result<Int, Errno>
                if position == connection.outboxOffset, let passing = connection.outgoingDescriptors.rawValues.first {
                    result = connection.outbox.withUnsafeBytes { raw in
                        DescriptorPassing.send(connection.descriptor, UnsafeRawBufferPointer(
                            rebasing: raw[connection.outboxOffset..<connection.outboxOffset + 1]),
                            descriptors: [passing])
                    }
                    if case .success(1) = result { connection.closeSentDescriptor() }
                } else {
                    let end = position ?? connection.outbox.count
                    result = connection.outbox.withUnsafeBytes { raw in
                        Socket.send(connection.descriptor, UnsafeRawBufferPointer(rebasing: raw[connection.outboxOffset..<end]))
                    }
                }
                switch result {
                case .success(0):
                    return  // socket buffer full: POLLOUT will bring us back
                case .success(let count):
                    connection.outboxOffset += count
                    connection.lastActivity = ContinuousClock.now
                case .failure:
                    close(connection)  // EPIPE, ECONNRESET: the peer left
                    return
                }
            }
            settle(connection)
        }

        /// Moves a closing connection on once everything owed to it is written.
        mutating func settle(_ connection: Connection) {
            guard connections[connection.id] != nil, !connection.inFlight, !connection.hasOutput else { return }
            guard case .closing = connection.phase else { return }
            if connection.readEOF || stopping {
                close(connection)
                return
            }
            shutdown(connection.descriptor, CInt(SHUT_WR))
            connection.phase = .lingering(until: ContinuousClock.now + server.limits.linger, discarded: 0)
        }

        /// Why `peer` may not have another connection now, or nil. Unprivileged peers get
        /// `maxConnections - reservedConnections` slots in all and `maxConnectionsPerUser`
        /// each; root and administrators every slot, with no per-user limit.
        func turnAway(_ peer: Peer) -> String? {
            let limits = server.limits
            if connections.count >= limits.maxConnections {
                return "the broker serves \(limits.maxConnections) connections already; try again later"
            }
            let mine = perUser[peer.accountable] ?? 0
            let refusal: String
            if mine >= limits.maxConnectionsPerUser {
                refusal = "uid \(peer.uid) has \(mine) connections open already, the most one user may; close some and "
                    + "try again"
            } else if connections.count >= limits.maxConnections - limits.reservedConnections {
                refusal = "the broker's connections for users are all in use (the rest are kept for administrators); "
                    + "try again later"
            } else {
                return nil
            }
            // Asked only when a limit is reached: it is a group lookup (NSS), and every
            // accept runs on this one thread.
            return server.handler.isPrivileged(peer) ? nil : refusal
        }

        /// `uid`'s connection that has done nothing longest and could go without loss: one
        /// already lingering, else one with no request in flight, no half-read message and
        /// nothing left to write, idle at least `evictableAfter`.
        func idlest(of uid: UInt32) -> Connection? {
            let now = ContinuousClock.now
            var idlest: Connection?
            for connection in connections.values where connection.peer.uid == uid {
                if connection.isLingering { return connection }
                guard connection.isOpen, !connection.inFlight, !connection.hasOutput,
                      connection.framer.pendingByteCount == 0,
                      now - connection.lastActivity >= server.limits.evictableAfter else { continue }
                if idlest.map({ connection.lastActivity < $0.lastActivity }) ?? true { idlest = connection }
            }
            return idlest
        }

        mutating func close(_ connection: Connection) {
            guard connections.removeValue(forKey: connection.id) != nil else { return }
            if let count = perUser[connection.peer.accountable], count > 1 {
                perUser[connection.peer.accountable] = count - 1
            } else {
                perUser.removeValue(forKey: connection.peer.accountable)
            }
            detachExchange(connection, stopping ? .shutdown : .closed)
            connection.closeReceivedDescriptors()
            connection.closeOutgoingDescriptors()
            connection.closeSocket()
            if log.isEnabled(.debug) {
                log.debug("client disconnected", ["connection": String(connection.id), "uid": String(connection.peer.uid)])
            }
        }

        // MARK: mailbox, signals, timers

        mutating func drainMailbox(onStopping: () -> Void) {
            var counter: UInt64 = 0
            _ = Glibc.read(server.wakeDescriptor, &counter, MemoryLayout<UInt64>.size)
            let (completions, stop, reason) = server.mailbox.withLock { box -> ([Completion], Bool, String) in
                let taken = box.completions
                box.completions.removeAll(keepingCapacity: true)
                return (taken, box.stopRequested, box.stopReason)
            }
            for completion in completions {
                // The client left meanwhile, or broke the conversation: nobody reads this.
                guard let connection = connections[completion.connection], connection.exchange != nil,
                      connection.exchangeSerial == completion.serial else {
                    if let descriptor = completion.descriptor { FileDescriptor(owning: descriptor).close() }
                    continue
                }
                if completion.update && connection.outboxFull {
                    log.info("closing a subscriber that leaves its updates unread",
                             ["uid": String(connection.peer.uid), "pid": String(connection.peer.pid),
                              "unsent_bytes": String(connection.outbox.count - connection.outboxOffset)])
                    close(connection)
                    continue
                }
                if completion.final {
                    connection.inFlight = false
                    connection.awaitingAnswer = false
                    connection.relayingSignals = false
                    connection.exchange = nil
                } else if completion.awaitingAnswer {
                    connection.awaitingAnswer = true
                    if completion.relaysSignals { connection.relayingSignals = true }
                }
                connection.enqueue(completion.line, passing: completion.descriptor)
                flush(connection)
                guard connections[completion.connection] != nil else { continue }
                process(connection)
            }
            if stop && !stopping { beginStop(reason: reason, onStopping: onStopping) }
        }

        mutating func readSignal(onStopping: () -> Void) {
            guard let signalDescriptor else { return }
            var info = signalfd_siginfo()
            let count = Glibc.read(signalDescriptor, &info, MemoryLayout<signalfd_siginfo>.size)
            guard count == MemoryLayout<signalfd_siginfo>.size else { return }
            let name = info.ssi_signo == UInt32(SIGTERM) ? "SIGTERM" : info.ssi_signo == UInt32(SIGINT) ? "SIGINT"
                : "signal \(info.ssi_signo)"
            if info.ssi_signo == UInt32(SIGHUP) {
                log.info("SIGHUP received; reading the policy again", ["from_pid": String(info.ssi_pid)])
                server.handler.reload()
                return
            }
            beginStop(reason: "\(name) from pid \(info.ssi_pid)", onStopping: onStopping)
        }

        mutating func beginStop(reason: String, onStopping: () -> Void) {
            stopping = true
            stopDeadline = ContinuousClock.now + server.limits.shutdownGrace
            log.info("shutting down", ["reason": reason, "connections": String(connections.count)])
            onStopping()
            server.listenerBox.close()
            // Requests waiting for a person (a prompt, an approval) end now, without a
            // decision, and their final replies are written within the grace period.
            for connection in connections.values { connection.exchange?.depart(.shutdown) }
            for connection in Array(connections.values) {
                switch connection.phase {
                case .open:
                    connection.phase = .closing
                    settle(connection)
                case .closing, .lingering:
                    break
                }
                if !connection.inFlight && !connection.hasOutput && connections[connection.id] != nil {
                    close(connection)
                }
            }
        }

        mutating func sweep() {
            let now = ContinuousClock.now
            guard now - lastSweep >= .milliseconds(250) else { return }
            lastSweep = now
            for connection in Array(connections.values) {
                switch connection.phase {
                case .lingering(let until, _):
                    if now >= until { close(connection) }
                case .open:
                    guard !connection.inFlight else { continue }
                    if let since = connection.partialSince, now - since >= server.limits.messageTimeout {
                        reject(connection, id: 0, ProtocolError(.timeout, context: "message",
                            reason: "a message was still incomplete (no newline) \(server.limits.messageTimeout) "
                                + "after its first byte; send each message whole"))
                        continue
                    }
                    guard now - connection.lastActivity >= server.limits.idleTimeout else { continue }
                    if connection.framer.pendingByteCount > 0 {
                        reject(connection, id: 0, ProtocolError(.timeout, context: "message",
                            reason: "a message stayed incomplete (no newline) for \(server.limits.idleTimeout)"))
                    } else {
                        close(connection)
                    }
                case .closing:
                    // Still owed a reply or still writing; a peer that never reads is dropped.
                    if !connection.inFlight && now - connection.lastActivity >= server.limits.idleTimeout {
                        close(connection)
                    }
                }
            }
        }
    }
}

/// Holds the listener so that stopping can close it exactly once.
final class ListenerBox: Sendable {
    private let listener: Mutex<Listener?>

    init(_ listener: Listener) {
        self.listener = Mutex(listener)
    }

    func close() {
        let taken = listener.withLock { box -> Listener? in
            let current = box
            box = nil
            return current
        }
        taken?.close()
    }
}
