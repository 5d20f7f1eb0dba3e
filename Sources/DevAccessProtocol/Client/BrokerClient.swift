import Glibc
import CLinux
import DevAccessCore
import DevAccessSystem
import DevAccessInterface

/// Why a call to the broker failed. `unreachable` and `timedOut` mean "no broker to
/// talk to" (the CLI exits 69); `rejected` carries the broker's own error frame.
public enum BrokerClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Nothing listens at the path, the connection was refused, or the path cannot be used;
    /// `systemCall` is the failed call and its errno when one said so (ENOENT, ECONNREFUSED, EACCES).
    case unreachable(path: String, reason: String, systemCall: SystemCallError? = nil)
    /// The broker did not accept, take or answer the message within the timeout.
    case timedOut(path: String, operation: String, seconds: Double)
    /// The broker closed the connection before answering.
    case closed(path: String)
    /// The broker's reply broke the protocol.
    case badReply(path: String, ProtocolError)
    /// The broker answered with an error frame.
    case rejected(ProtocolError)
    /// A socket call failed after the connection was made.
    case io(path: String, SystemCallError)

    public var description: String {
        switch self {
        case .unreachable(let path, let reason, _):
            return "cannot reach devaccessd at \(path): \(reason)"
        case .timedOut(let path, let operation, let seconds):
            return "devaccessd at \(path) did not \(operation) within \(seconds) s"
        case .closed(let path):
            return "devaccessd at \(path) closed the connection without answering"
        case .badReply(let path, let error):
            return "devaccessd at \(path) sent a reply that breaks the protocol: \(error)"
        case .rejected(let error):
            return "devaccessd refused (\(error.code)): \(error.reason)"
        case .io(let path, let failure):
            return "talking to devaccessd at \(path): \(failure)"
        }
    }

    /// The system call that failed and its errno, for a caller that must tell them apart.
    public var systemCall: SystemCallError? {
        switch self {
        case .unreachable(_, _, let failure): return failure
        case .io(_, let failure): return failure
        case .timedOut, .closed, .badReply, .rejected: return nil
        }
    }
}

/// A blocking client for devaccessd: one connection, used from one thread at a time.
///
/// Every wait (connect, send, receive) is bounded by `timeout`. Replies are decoded
/// as strictly as the broker decodes requests.
public final class BrokerClient {
    public let socketPath: String
    public var timeout: Duration
    private let connection: FileDescriptor
    private var descriptor: CInt { connection.rawValue }
    private var framer = LineFramer(maxLineLength: BrokerProtocol.maxReplySize)
    private var nextID: Int64 = 1
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// Descriptors that came with replies (an `opened`), not yet taken.
    private var receivedDescriptors: [CInt] = []
    /// The most descriptors kept waiting to be taken; older ones beyond it are closed.
    static let maxHeldDescriptors = 8

    /// `socketPath`: the caller's choice (`DeviceAccess.configuredSocketPath` is the
    /// library's default, `--socket` or `$DEVACCESS_SOCKET` the CLI's).
    public init(socketPath: String,
                timeout: Duration = .seconds(10)) throws(BrokerClientError) {
        self.socketPath = socketPath
        self.timeout = timeout
        connection = try Self.connect(socketPath, deadline: ContinuousClock.now + timeout, timeout: timeout)
    }

    deinit {
        for passed in receivedDescriptors { FileDescriptor(owning: passed).close() }
    }

    // MARK: Requests

    /// Sends `request` and waits for its reply; an error frame is returned, not thrown.
    public func send(_ request: Request) throws(BrokerClientError) -> Reply {
        let id = nextID
        nextID += 1
        var line = MessageCodec.encode(RequestEnvelope(id: id, request: request))
        line.append(0x0a)
        let deadline = ContinuousClock.now + timeout
        do {
            try write(line, deadline: deadline)
        } catch .closed(let path) {
            // The broker may have answered and closed before taking the request (a
            // `busy` frame right after connect): report its frame if there is one.
            guard let early = try? readReply(deadline: deadline), early.id == 0 else { throw .closed(path: path) }
            return early.reply
        }
        let envelope = try readReply(deadline: deadline)
        guard envelope.id == id || (envelope.id == 0 && isError(envelope.reply)) else {
            throw .badReply(path: socketPath, ProtocolError(.badMessage, context: "$.id",
                            reason: "reply id \(envelope.id) does not answer request \(id)"))
        }
        return envelope.reply
    }

    public func hello() throws(BrokerClientError) -> HelloReply {
        switch try send(.hello) {
        case .hello(let reply): return reply
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: "hello")
        }
    }

    public func status(_ permissions: [Permission]? = nil, user: String? = nil) throws(BrokerClientError) -> StatusReply {
        switch try send(.status(StatusQuery(permissions: permissions, user: user))) {
        case .status(let reply): return reply
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: "status")
        }
    }

    /// Admin: the requests waiting for approval.
    public func pending() throws(BrokerClientError) -> PendingListReply {
        switch try send(.pending) {
        case .pending(let reply): return reply
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: "pending")
        }
    }

    /// Admin: approves (`approve: true`) or rejects a pending request.
    /// `scope` (approve): the term to grant instead of the one requested. `deny` (reject):
    /// record a denial rather than decline the request only.
    public func resolve(_ pending: Int64, approve: Bool, reason: String? = nil, scope: GrantTerm? = nil,
                        deny: Bool = false) throws(BrokerClientError) -> ResolvedReply {
        let action = PendingAction(pending: pending, reason: reason, scope: scope, deny: deny)
        switch try send(approve ? .approve(action) : .reject(action)) {
        case .resolved(let reply): return reply
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: approve ? "approve" : "reject")
        }
    }

    /// An operation answered by `result` (`decide`, `list`, ...): its result document.
    public func perform(_ request: Request) throws(BrokerClientError) -> OperationResult {
        switch try send(request) {
        case .result(let result): return result
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: request.type)
        }
    }

    /// Has devaccessd open a node of a device the caller is granted; the
    /// reply, and the descriptor that came with it (the caller owns it).
    public func open(_ order: OpenOrder) throws(BrokerClientError) -> (OpenedReply, CInt) {
        switch try send(.open(order)) {
        case .opened(let reply):
            let passed = takeDescriptors()
            guard let first = passed.first else {
                throw .badReply(path: socketPath, ProtocolError(.badMessage, context: "descriptors",
                                reason: "an 'opened' reply came without the node's descriptor"))
            }
            for extra in passed.dropFirst() { FileDescriptor(owning: extra).close() }
            return (reply, first)
        case .error(let error): throw .rejected(error)
        case let other: throw unexpected(other, for: "open")
        }
    }

    /// The descriptors replies brought (SCM_RIGHTS) since the last call; the caller owns them.
    public func takeDescriptors() -> [CInt] {
        defer { receivedDescriptors = [] }
        return receivedDescriptors
    }

    // MARK: Conversations (request)

    /// Sends `request` and returns its id without waiting; read its replies with
    /// `nextReply(to:timeout:)` and answer prompts with `answer(_:to:)`.
    public func start(_ request: Request) throws(BrokerClientError) -> Int64 {
        let id = nextID
        nextID += 1
        var line = MessageCodec.encode(RequestEnvelope(id: id, request: request))
        line.append(0x0a)
        try write(line, deadline: ContinuousClock.now + timeout)
        return id
    }

    /// The next reply to request `id`: a `prompt` or `queued` (more follows), or the final
    /// one. `timeout` nil waits as long as it takes (an administrator's approval).
    public func nextReply(to id: Int64, timeout: Duration?) throws(BrokerClientError) -> Reply {
        let envelope = try readReply(deadline: timeout.map { ContinuousClock.now + $0 })
        guard envelope.id == id || (envelope.id == 0 && isError(envelope.reply)) else {
            throw .badReply(path: socketPath, ProtocolError(.badMessage, context: "$.id",
                            reason: "reply id \(envelope.id) does not answer request \(id)"))
        }
        return envelope.reply
    }

    /// Sends a `run` with `descriptors` (stdin, stdout, stderr) attached to its first byte;
    /// returns its id. Read its replies with `nextReply(to:timeout:)`.
    public func startRun(_ order: RunOrder, descriptors: [CInt]) throws(BrokerClientError) -> Int64 {
        let id = nextID
        nextID += 1
        var line = MessageCodec.encode(RequestEnvelope(id: id, request: .run(order)))
        line.append(0x0a)
        while true {
            do throws(SystemCallError) {
                _ = try SystemCall.value("sendmsg") {
                    line.withUnsafeBytes { raw in
                        descriptors.withUnsafeBufferPointer { fds in
                            devaccess_send_with_fds(descriptor, raw.baseAddress, 1, CInt(MSG_NOSIGNAL), fds.baseAddress,
                                                    CInt(fds.count))
                        }
                    }
                }
                break
            } catch where error.errno == .wouldBlock {
                try Self.waitFor(descriptor, events: Int16(POLLOUT), deadline: ContinuousClock.now + timeout,
                                 path: socketPath, operation: "take the request", timeout: timeout)
            } catch {
                throw sendFailure(error)
            }
        }
        try write(Array(line.dropFirst()), deadline: ContinuousClock.now + timeout)
        return id
    }

    /// Relays `signal` to the program of run `id`.
    public func signal(_ signal: Int32, run id: Int64) throws(BrokerClientError) {
        var line = MessageCodec.encode(RequestEnvelope(id: id, request: .runSignal(RunSignal(signal: signal))))
        line.append(0x0a)
        try write(line, deadline: ContinuousClock.now + timeout)
    }

    /// Answers a prompt of request `id`.
    public func answer(_ answer: PromptAnswer, to id: Int64) throws(BrokerClientError) {
        var line = MessageCodec.encode(RequestEnvelope(id: id, request: .promptAnswer(answer)))
        line.append(0x0a)
        try write(line, deadline: ContinuousClock.now + timeout)
    }

    /// The socket, for poll(2) next to a terminal. Poll it only while `hasBufferedReply`
    /// is false: a reply already read into the buffer does not make the socket readable.
    public var pollDescriptor: CInt { descriptor }

    public var hasBufferedReply: Bool { framer.hasCompleteLine }

    // MARK: Raw access (tests, fuzzing, benchmarks)

    /// Writes bytes as they are, no framing added.
    public func writeRaw(_ bytes: [UInt8]) throws(BrokerClientError) {
        try write(bytes, deadline: ContinuousClock.now + timeout)
    }

    /// Reads the next reply, whatever request it answers.
    public func readReply() throws(BrokerClientError) -> ReplyEnvelope {
        try readReply(deadline: ContinuousClock.now + timeout)
    }

    /// Ends the sending direction (the broker sees end of stream) and keeps reading.
    public func shutdownWriting() {
        _ = shutdown(descriptor, CInt(SHUT_WR))
    }

    // MARK: Socket work

    private func isError(_ reply: Reply) -> Bool {
        if case .error = reply { return true }
        return false
    }

    private func unexpected(_ reply: Reply, for request: String) -> BrokerClientError {
        .badReply(path: socketPath, ProtocolError(.badMessage, context: "$.type",
                  reason: "a '\(reply.type)' reply does not answer a '\(request)' request"))
    }

    private static func connect(_ path: String, deadline: ContinuousClock.Instant,
                                timeout: Duration) throws(BrokerClientError) -> FileDescriptor {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !pathBytes.isEmpty, pathBytes.count < capacity, !pathBytes.contains(0) else {
            throw .unreachable(path: path, reason: "not a usable socket path (at most \(capacity - 1) bytes)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
        }
        let fd = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .io(path: path, .current("socket")) }
        let descriptor = FileDescriptor(owning: fd)
        let length = Int(MemoryLayout<sa_family_t>.size + pathBytes.count + 1)
        while true {
            let started = withUnsafeBytes(of: &address) { raw in
                Result { () throws(SystemCallError) in
                    try NonBlockingConnect.start(fd, to: UnsafeRawBufferPointer(rebasing: raw.prefix(length)))
                }
            }
            guard case .failure(let failed) = started else {
                if case .success(.inProgress) = started {
                    try waitFor(fd, events: Int16(POLLOUT), deadline: deadline, path: path,
                                operation: "accept the connection", timeout: timeout)
                    do {
                        try NonBlockingConnect.outcome(fd)
                    } catch {
                        let failure = SystemCallError(error.function, path: path, error.errno)
                        throw .unreachable(path: path, reason: Self.connectReason(failure), systemCall: failure)
                    }
                }
                return descriptor
            }
            let error = failed.errno.rawValue
            switch error {
            case EAGAIN:
                // The broker's accept queue is full: it is busy, not gone. Retry until the deadline.
                if ContinuousClock.now >= deadline {
                    throw .timedOut(path: path, operation: "accept the connection", seconds: seconds(timeout))
                }
                usleep(1000)
            default:
                let failure = SystemCallError("connect", path: path, Errno(rawValue: error))
                let hint: String
                switch failure.errno {
                case .noSuchFile: hint = "; no socket there: is devaccessd running?"
                case .connectionRefused: hint = "; nothing accepts on it: devaccessd is not running"
                case .permissionDenied: hint = "; the socket or its directory is not accessible to this user"
                default: hint = ""
                }
                throw .unreachable(path: path, reason: Self.connectReason(failure) + hint, systemCall: failure)
            }
        }
    }

    /// connect's errno without the path, which the message names once already.
    private static func connectReason(_ failure: SystemCallError) -> String {
        "\(failure.function): \(failure.errno.message) (\(failure.errno.name))"
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Waits until `fd` is ready; a nil deadline waits without limit.
    private static func waitFor(_ fd: CInt, events: Int16, deadline: ContinuousClock.Instant?, path: String,
                                operation: String, timeout: Duration) throws(BrokerClientError) {
        let ready: Bool
        do {
            ready = try Poll.wait(for: Poll.Interest(fd, events: events), until: deadline)
        } catch {
            throw .io(path: path, error)
        }
        if !ready { throw .timedOut(path: path, operation: operation, seconds: seconds(timeout)) }
    }

    private func write(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws(BrokerClientError) {
        var offset = 0
        while offset < bytes.count {
            do throws(SystemCallError) {
                offset += try SystemCall.value("send") {
                    bytes.withUnsafeBytes { raw in
                        Glibc.send(descriptor, raw.baseAddress! + offset, raw.count - offset, CInt(MSG_NOSIGNAL))
                    }
                }
            } catch where error.errno == .wouldBlock {
                try Self.waitFor(descriptor, events: Int16(POLLOUT), deadline: deadline, path: socketPath,
                                 operation: "take the request", timeout: timeout)
            } catch {
                throw sendFailure(error)
            }
        }
    }

    /// A send that failed: the broker hung up (EPIPE, ECONNRESET), or another error.
    private func sendFailure(_ error: SystemCallError) -> BrokerClientError {
        switch error.errno.rawValue {
        case EPIPE, ECONNRESET: return .closed(path: socketPath)
        default: return .io(path: socketPath, error)
        }
    }

    private func readReply(deadline: ContinuousClock.Instant?) throws(BrokerClientError) -> ReplyEnvelope {
        while true {
            switch framer.next() {
            case .line(let line):
                do {
                    return try MessageCodec.decodeReply(line)
                } catch {
                    throw .badReply(path: socketPath, error)
                }
            case .tooLarge:
                throw .badReply(path: socketPath, ProtocolError(.tooLarge, context: "reply",
                                reason: "more than \(BrokerProtocol.maxReplySize) bytes without a newline"))
            case .needMore:
                break
            }
            try Self.waitFor(descriptor, events: Int16(POLLIN), deadline: deadline, path: socketPath,
                             operation: "answer", timeout: timeout)
            // recvmsg, not recv: a descriptor passed with a reply (`opened`) would otherwise
            // be dropped by the kernel.
            var passed = [CInt](repeating: -1, count: Int(DEVACCESS_MAX_PASSED_FDS))
            var passedCount: CInt = 0
            var truncated: CInt = 0
            let received = valueOrErrno {
                buffer.withUnsafeMutableBytes { raw in
                    devaccess_recv_with_fds(descriptor, raw.baseAddress, raw.count, 0, &passed, &passedCount, &truncated)
                }
            }
            receivedDescriptors += passed.prefix(Int(passedCount))
            // Only an `opened` brings one, and its caller takes it at once: a peer that sends
            // more (not devaccessd) must not fill this process's descriptor table.
            while receivedDescriptors.count > Self.maxHeldDescriptors {
                FileDescriptor(owning: receivedDescriptors.removeFirst()).close()
            }
            switch received {
            case .success(let count) where count > 0:
                buffer.withUnsafeBytes { raw in framer.append(UnsafeRawBufferPointer(rebasing: raw[0..<count])) }
            case .success:
                if framer.pendingByteCount > 0 {
                    throw .badReply(path: socketPath, ProtocolError(.truncated, context: "reply",
                                    reason: "the connection ended in the middle of a reply"))
                }
                throw .closed(path: socketPath)
            case .failure(.wouldBlock):
                continue
            case .failure(let error) where error.rawValue == ECONNRESET:
                throw .closed(path: socketPath)
            case .failure(let error):
                throw .io(path: socketPath, SystemCallError("recvmsg", error))
            }
        }
    }
}
