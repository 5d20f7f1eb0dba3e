import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessProtocol
import DevAccessSystem
import DevAccessInterface

/// DevAccess's lower layer: one connection to devaccessd, the protocol's requests as they
/// are, and its failures as the protocol states them (`BrokerClientError`).
///
/// It is the one way this package's clients reach devaccessd: every ``DeviceAccess`` call
/// and every command of the `devaccess` CLI connects, sends, waits (with its deadline or
/// without one) and receives here. It is SPI for the CLI (`@_spi(CLI) import DevAccess`):
/// the administrative operations (approve, reject, decide, the audit trail), `run`, and a
/// request whose prompts are answered at a terminal are not part of the app API and change
/// with the protocol. Programs use ``DeviceAccess``.
///
/// Used from one thread at a time. Calls block that thread.
@_spi(CLI) public final class BrokerSession {
    public let socketPath: String
    private let client: BrokerClient

    /// devaccessd's replies, as the conversations' events carry them.
    public typealias Reply = DevAccessProtocol.Reply

    /// Connects; `timeout` bounds the connect and each later exchange that has a deadline.
    public init(socketPath: String,
                timeout: Duration) throws(BrokerClientError) {
        self.socketPath = socketPath
        client = try BrokerClient(socketPath: socketPath, timeout: timeout)
    }

    /// Connects with `cancellation` attached: cancelling shuts the socket down, which wakes
    /// any wait on it at once.
    convenience init(socketPath: String, timeout: Duration,
                     cancellation: CallCancellation) throws(BrokerClientError) {
        try self.init(socketPath: socketPath, timeout: timeout)
        cancellation.attach(client.pollDescriptor)
    }

    // MARK: One request, one reply

    public func hello() throws(BrokerClientError) -> HelloReply { try client.hello() }

    public func status(_ permissions: [Permission]? = nil, user: String? = nil) throws(BrokerClientError) -> StatusReply {
        try client.status(permissions, user: user)
    }

    /// The approval queue: every request for an admin, the caller's own otherwise.
    public func pending() throws(BrokerClientError) -> PendingListReply { try client.pending() }

    /// Approves (`approve: true`) or rejects pending request `pending` (admin).
    public func resolve(_ pending: Int64, approve: Bool, reason: String? = nil, scope: GrantTerm? = nil,
                        deny: Bool = false) throws(BrokerClientError) -> ResolvedReply {
        try client.resolve(pending, approve: approve, reason: reason, scope: scope, deny: deny)
    }

    /// An operation answered by `result` (`decide`, `list`, `location`, ...): its result document.
    public func perform(_ request: Request) throws(BrokerClientError) -> OperationResult {
        try client.perform(request)
    }

    /// The same, its document decoded. A document that does not decode is a reply that
    /// breaks the protocol (`badReply`): devaccessd is another version.
    public func document<Document: Decodable>(_ request: Request,
                                              as type: Document.Type = Document.self) throws(BrokerClientError) -> Document {
        let result = try perform(request)
        do {
            return try JSONDecoder().decode(Document.self, from: Data(JSONWriter.bytes(result.document)))
        } catch {
            throw .badReply(path: socketPath, ProtocolError(.badMessage, context: "document",
                            reason: "the '\(request.type)' result is not what this devaccess expects (\(error)); "
                                + "is devaccessd the same version?"))
        }
    }

    /// `open`: the reply, and the descriptor that came with it (the caller owns it).
    public func open(_ order: OpenOrder) throws(BrokerClientError) -> (OpenedReply, CInt) {
        try client.open(order)
    }

    // MARK: Conversations (request, run, subscribe)

    /// Sends `request` without waiting; its replies come from ``next(to:deadline:watching:)``.
    public func start(_ request: Request) throws(BrokerClientError) -> Int64 {
        try client.start(request)
    }

    /// Sends a `run` with `descriptors` (stdin, stdout, stderr) passed along; its id.
    public func startRun(_ order: RunOrder, descriptors: [CInt]) throws(BrokerClientError) -> Int64 {
        try client.startRun(order, descriptors: descriptors)
    }

    /// Answers prompt `prompt` of conversation `id`.
    public func answer(_ prompt: PromptMessage, _ answer: PromptAnswer.Answer, to id: Int64) throws(BrokerClientError) {
        try client.answer(PromptAnswer(prompt: prompt.prompt, answer: answer), to: id)
    }

    /// Relays `signal` to the program of run `id`.
    public func signal(_ signal: Int32, run id: Int64) throws(BrokerClientError) {
        try client.signal(signal, run: id)
    }

    /// What ended a wait for the next reply.
    public enum Event {
        case reply(Reply)
        /// The descriptor watched next to the socket became readable first.
        case watched
        /// The deadline passed without a reply.
        case timedOut
    }

    /// The next reply of conversation `id`, unless `watching` (a signal pipe) becomes
    /// readable first or `deadline` passes (nil: wait as long as it takes, for a person or
    /// an administrator; devaccessd bounds its prompts itself). Once a reply has begun to
    /// arrive, the rest of it must come within the session's timeout.
    public func next(to id: Int64, deadline: ContinuousClock.Instant? = nil,
                     watching: CInt? = nil) throws(BrokerClientError) -> Event {
        while !client.hasBufferedReply {
            var interests = [Poll.Interest.readable(client.pollDescriptor)]
            if let watching { interests.append(.readable(watching)) }
            let ready: [Int16]?
            do {
                ready = try Poll.wait(interests, until: deadline)
            } catch {
                throw .io(path: socketPath, error)
            }
            guard let ready else { return .timedOut }
            if watching != nil, ready[1] != 0 { return .watched }
            if ready[0] != 0 { break }
        }
        return .reply(try client.nextReply(to: id, timeout: client.timeout))
    }

    /// The socket, to wait on next to a terminal; only while ``hasBufferedReply`` is false
    /// (a reply already read does not make the socket readable).
    public var pollDescriptor: CInt { client.pollDescriptor }
    public var hasBufferedReply: Bool { client.hasBufferedReply }
}
