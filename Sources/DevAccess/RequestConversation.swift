import DevAccessCore
import DevAccessProtocol
import DevAccessInterface

/// What a request does between devaccessd's replies: answer the prompts it sends over the
/// connection, note that the request waits for an administrator, decide how long to wait.
///
/// ``DeviceAccess``'s own handler shows no prompt: it answers `cancel` with `no-terminal`
/// (`ask` prompts never come here: devaccessd asks on the user's login terminal itself; a
/// `password` prompt for `auth_self` does). ``ContractConversation`` carries the contract's
/// `RequestConversation` (the CLI's terminal) on this same loop.
protocol RequestConversationHandler {
    /// A descriptor to watch next to the socket (a signal pipe); nil: none.
    var watched: CInt? { get }
    /// How long to wait for the next reply; nil: as long as it takes.
    func waitLimit(waitingForAdmin: Bool) -> Duration?
    /// The wait limit passed without a reply: the error to end the request with.
    func limitPassed() -> any Error
    /// `watched` became readable. Return to keep waiting; throw to end the request.
    mutating func watchedIsReady(waitingForAdmin: Bool) throws
    /// devaccessd asks a person on this connection: answer with `session.answer(prompt, …, to: id)`,
    /// or not at all when the prompt ended another way (devaccessd's answer is next then).
    mutating func prompt(_ prompt: PromptMessage, session: BrokerSession, id: Int64) throws
    /// Some permissions wait for an administrator (`reply.waiting`: this request waits with them).
    mutating func queued(_ reply: QueuedReply)
}

extension DeviceAccess {
    /// One `request` on its own connection, from send to devaccessd's final `decision`, on
    /// the calling thread (it blocks), `handler` carrying the conversation on. The async
    /// ``request(_:reason:required:term:accuracy:waitForApproval:)`` runs this on a thread
    /// of its own with a handler that shows no prompt.
    ///
    /// - Throws: devaccessd's failures as `InterfaceError(conversation:)` states them (its
    ///   error frame, one of `handler`'s answers that did not go through), and whatever else
    ///   `handler` throws.
    func request<Handler: RequestConversationHandler>(
        _ order: AccessRequest, conversation handler: inout Handler
    ) throws -> DecisionReply {
        do {
            let session = try BrokerSession(socketPath: socketPath, timeout: timeout)
            return try Self.converse(order, session: session, handler: &handler)
        } catch let error as BrokerClientError {
            throw InterfaceError(conversation: error)
        }
    }

    static func converse<Handler: RequestConversationHandler>(
        _ order: AccessRequest, session: BrokerSession, handler: inout Handler
    ) throws -> DecisionReply {
        let id = try session.start(.request(order))
        var waitingForAdmin = false
        while true {
            let deadline = handler.waitLimit(waitingForAdmin: waitingForAdmin).map { ContinuousClock.now + $0 }
            switch try session.next(to: id, deadline: deadline, watching: handler.watched) {
            case .watched:
                try handler.watchedIsReady(waitingForAdmin: waitingForAdmin)
            case .timedOut:
                throw handler.limitPassed()
            case .reply(.prompt(let prompt)):
                try handler.prompt(prompt, session: session, id: id)
            case .reply(.queued(let reply)):
                if reply.waiting { waitingForAdmin = true }
                handler.queued(reply)
            case .reply(.decision(let decision)):
                return decision
            case .reply(.error(let frame)):
                throw BrokerClientError.rejected(frame)
            case .reply(let other):
                throw BrokerClientError.badReply(path: session.socketPath, ProtocolError(.badMessage, context: "$.type",
                    reason: "a '\(other.type)' reply does not belong to a request"))
            }
        }
    }
}

/// The contract's `RequestConversation` (BrokerInterface.request) as a handler of the loop
/// above: its prompts answered on ``SessionPromptLine``, its errors the contract's.
struct ContractConversation: RequestConversationHandler {
    let conversation: any RequestConversation

    var watched: CInt? { conversation.watched }

    func waitLimit(waitingForAdmin: Bool) -> Duration? { conversation.waitLimit(waitingForAdmin: waitingForAdmin) }

    func limitPassed() -> any Error { conversation.limitPassed() }

    func watchedIsReady(waitingForAdmin: Bool) throws { try conversation.watchedIsReady(waitingForAdmin: waitingForAdmin) }

    func prompt(_ prompt: PromptMessage, session: BrokerSession, id: Int64) throws {
        try conversation.prompt(prompt, line: SessionPromptLine(session: session, prompt: prompt, id: id))
    }

    func queued(_ reply: QueuedReply) { conversation.queued(reply) }
}

/// A prompt's connection (request or run): devaccessd's socket, and the answer sent on it.
struct SessionPromptLine: PromptLine {
    let session: BrokerSession
    let prompt: PromptMessage
    let id: Int64

    var pollDescriptor: CInt { session.pollDescriptor }
    var hasBufferedReply: Bool { session.hasBufferedReply }

    func answer(_ answer: PromptAnswer.Answer) throws(InterfaceError) {
        do {
            try session.answer(prompt, answer, to: id)
        } catch {
            throw InterfaceError(conversation: error)
        }
    }
}

/// ``DeviceAccess``'s own conversation: no prompt shown, no limit on the wait (cancelling
/// the task ends it), and a request it queued is withdrawn when the task is cancelled.
///
/// Cancellation does not cut the connection at once: devaccessd may have queued the
/// request without this call having read the `queued` reply yet, and a request whose
/// requester only leaves stays queued. So a cancelled call waits up to ``grace`` for
/// devaccessd to say what it queued (a `queued` reply, or the decision; a prompt is
/// answered `interrupted` and the wait goes on: devaccessd may queue after it), then
/// withdraws what it queued, and only then lets go. An `ask` prompt on the login terminal sends no
/// reply until decided: it closes after the grace, when the connection ends.
struct UnattendedRequest {
    let socketPath: String
    let timeout: Duration
    let cancellation: CallCancellation

    /// How long a cancelled request waits for devaccessd's first reply.
    static let grace: Duration = .seconds(1)

    /// Shows no prompt; remembers the queue number of a request this call put in the
    /// approval queue (not one an earlier request of the user had put there: that is
    /// not ours to withdraw).
    struct Unattended: RequestConversationHandler {
        let wake: CInt?
        var queued: Int64?
        /// When the task was cancelled; nil while it is not.
        var cancelledAt: ContinuousClock.Instant?
        /// devaccessd said what it queued (a `queued` reply); a prompt does not count: after
        /// it, devaccessd may still queue the administrator's part of the request.
        var answered = false

        struct Cancelled: Error {}

        var watched: CInt? { cancelledAt == nil ? wake : nil }

        func waitLimit(waitingForAdmin: Bool) -> Duration? {
            guard let cancelledAt else { return nil }
            if answered { return .zero }
            return UnattendedRequest.grace - cancelledAt.duration(to: .now)
        }

        func limitPassed() -> any Error { Cancelled() }

        mutating func watchedIsReady(waitingForAdmin: Bool) { cancelledAt = .now }

        mutating func prompt(_ prompt: PromptMessage, session: BrokerSession, id: Int64) throws {
            try session.answer(prompt, cancelledAt == nil ? .cancel(.noTerminal) : .cancel(.interrupted), to: id)
        }

        mutating func queued(_ reply: QueuedReply) {
            answered = true
            // Ours to withdraw when the task is cancelled, whether or not the call waits for it.
            if reply.new { queued = reply.pending }
        }
    }

    func run(_ order: AccessRequest) throws(DeviceAccessError) -> DecisionReply {
        var handler = Unattended(wake: cancellation.wakeDescriptor())
        guard !cancellation.isCancelled else { throw .cancelled }
        do {
            // No shutdown at cancellation (see above) unless there is no wake descriptor.
            let session = handler.wake == nil
                ? try BrokerSession(socketPath: socketPath, timeout: timeout, cancellation: cancellation)
                : try BrokerSession(socketPath: socketPath, timeout: timeout)
            defer { cancellation.detach() }
            // Detached before the session (and its socket) goes.
            let decision = try withExtendedLifetime(session) {
                try DeviceAccess.converse(order, session: session, handler: &handler)
            }
            // Cancelled before the decision came: what it queued meanwhile is withdrawn (below).
            if handler.cancelledAt != nil { throw Unattended.Cancelled() }
            return decision
        } catch let error as BrokerClientError {
            if cancellation.isCancelled {
                withdraw(handler.queued)
                throw .cancelled
            }
            if case .rejected(let frame) = error { throw DeviceAccessError(frame, permissions: order.permissions) }
            throw DeviceAccessError(error)
        } catch is Unattended.Cancelled {
            withdraw(handler.queued)
            throw .cancelled
        } catch let error as DeviceAccessError {
            throw error
        } catch {
            throw .protocol("\(error)")
        }
    }

    /// Takes a request this call queued out of the approval queue (devaccessd keeps a
    /// queued request when its requester only leaves). Best effort: if devaccessd cannot
    /// be reached, the request stays for an administrator to reject.
    private func withdraw(_ pending: Int64?) {
        guard let pending, let session = try? BrokerSession(socketPath: socketPath, timeout: timeout) else { return }
        _ = try? session.perform(.withdraw(PendingAction(pending: pending, reason: "the requesting task was cancelled")))
    }
}
