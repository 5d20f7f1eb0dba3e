import Glibc
import Synchronization
import DevAccessProtocol
import DevAccessInterface
import DevAccessSystem

/// One request's conversation with its client, as the handler sees it.
///
/// A request is answered by exactly one final reply (`finish`). Before it, a handler may
/// send interim replies (`send`: a `prompt`, `queued`) and, after a prompt, receive the
/// client's answer. Waiting for that answer is state on the connection, not a thread:
/// the event loop keeps reading the socket and hands the answer (or the client's
/// departure) to the listener, on the loop thread, so a listener must not block.
public final class Exchange: Sendable {
    /// Why the client can no longer answer.
    public enum Departure: Sendable, Hashable {
        /// The connection ended (the client exited or closed it).
        case closed
        /// The client shut down its sending side while an answer was awaited.
        case endOfStream
        /// The client sent something other than the awaited answer; the connection was closed.
        case badMessage
        /// The broker is stopping.
        case shutdown

        /// For logs and the audit trail.
        public var word: String {
            switch self {
            case .closed: return "closed"
            case .endOfStream: return "end-of-stream"
            case .badMessage: return "bad-message"
            case .shutdown: return "shutdown"
            }
        }
    }

    public enum ClientEvent: Sendable {
        /// The client's next message: a `prompt-answer` of this request (checked by the loop).
        case answer(PromptAnswer)
        case departed(Departure)
    }

    public typealias Listener = @Sendable (ClientEvent) -> Void

    public let request: RequestEnvelope
    let connection: UInt64
    /// Tells this exchange's replies from a later one's on the same connection.
    let serial: UInt64
    private let server: BrokerServer
    private let state = Mutex(State())

    private struct State: ~Copyable {
        var finished = false
        var departure: Departure?
        var listener: Listener?
        var signalHandler: (@Sendable (Int32) -> Void)?
        /// Descriptors that came with the request (a `run`'s stdin, stdout, stderr).
        var descriptors = FileDescriptors()
    }

    init(server: BrokerServer, connection: UInt64, serial: UInt64, request: RequestEnvelope) {
        self.server = server
        self.connection = connection
        self.serial = serial
        self.request = request
    }

    /// Sends an interim reply. With `awaitingAnswer`, the client's next message is read as
    /// the answer and goes to the listener; anything else closes the connection.
    public func send(_ reply: Reply, awaitingAnswer: Bool) {
        guard !state.withLock({ $0.finished }) else { return }
        var relays = false
        if case .runStarted = reply { relays = true }
        var update = false
        if case .update = reply { update = true }
        server.post(self, encode(reply), final: false, awaitingAnswer: awaitingAnswer, relaysSignals: relays,
                    update: update)
    }

    /// Sends the final reply; the connection goes on to its next request. Once only.
    /// `passing`: a descriptor to hand the client with the reply's first byte (SCM_RIGHTS);
    /// the exchange owns it from here and closes its copy once sent (or never sent).
    public func finish(_ reply: Reply, passing descriptor: CInt? = nil) {
        let first = state.withLock { state -> Bool in
            defer { state.finished = true }
            state.listener = nil
            state.signalHandler = nil
            return !state.finished
        }
        guard first else {
            if let descriptor { FileDescriptor(owning: descriptor).close() }
            return
        }
        closeUntakenDescriptors()
        server.post(self, encode(reply), final: true, awaitingAnswer: false, descriptor: descriptor)
    }

    /// `finish` with the reply already encoded for this exchange (`encode`): a kept status reply.
    func finish(line: [UInt8]) {
        let first = state.withLock { state -> Bool in
            defer { state.finished = true }
            state.listener = nil
            state.signalHandler = nil
            return !state.finished
        }
        guard first else { return }
        closeUntakenDescriptors()
        server.post(self, line, final: true, awaitingAnswer: false)
    }

    /// Calls `listener` once, with the next client event: the awaited answer, or the
    /// client's departure (at once if it already left).
    public func listen(_ listener: @escaping Listener) {
        let departed = state.withLock { state -> Departure? in
            if let departure = state.departure { return departure }
            state.listener = listener
            return nil
        }
        if let departed { listener(.departed(departed)) }
    }

    /// The descriptors that came with the request, handed over once: the caller owns them
    /// from here (they close when it lets them go).
    public func takeDescriptors() -> FileDescriptors {
        state.withLock { $0.descriptors.take() }
    }

    /// Calls `handler` with each `run-signal` the client sends from now on (a run's program
    /// is running). Replaces any earlier handler.
    public func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) {
        state.withLock { $0.signalHandler = handler }
    }

    /// The client left (or the broker stops), if it did.
    public var departure: Departure? { state.withLock { $0.departure } }

    // MARK: For the event loop

    func deliver(_ answer: PromptAnswer) {
        let listener = state.withLock { state -> Listener? in
            defer { state.listener = nil }
            return state.listener
        }
        listener?(.answer(answer))
    }

    func attach(_ descriptors: consuming FileDescriptors) {
        var given: FileDescriptors? = consume descriptors
        state.withLock { state in
            if let descriptors = given.take() { state.descriptors = descriptors }
        }
    }

    func deliver(signal: Int32) {
        let handler = state.withLock { $0.finished ? nil : $0.signalHandler }
        handler?(signal)
    }

    /// Closes descriptors nobody took (the request ended before its handler took them).
    func closeUntakenDescriptors() {
        takeDescriptors().close()
    }

    func depart(_ departure: Departure) {
        let listener = state.withLock { state -> Listener? in
            guard state.departure == nil, !state.finished else { return nil }
            state.departure = departure
            defer { state.listener = nil }
            return state.listener
        }
        listener?(.departed(departure))
    }

    /// The line `reply` is sent as on this exchange (its id and version; an error when too large).
    func encode(_ reply: Reply) -> [UInt8] {
        let line = MessageCodec.encode(ReplyEnvelope(id: request.id, reply: reply, version: request.version))
        guard line.count > BrokerProtocol.maxReplySize else { return line }
        return MessageCodec.encode(ReplyEnvelope(id: request.id, reply: .error(ProtocolError(
            .internal, context: request.request.type,
            reason: "the reply would exceed \(BrokerProtocol.maxReplySize) bytes; ask for less (fewer permissions, "
                + "or 'list' for one --user or --permission, without --all)")),
            version: request.version))
    }
}
