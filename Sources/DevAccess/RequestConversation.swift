import DevAccessCore
import DevAccessProtocol

/// One `request` on its own connection, from send to final `decision`, on the calling
/// thread. What devaccessd asks over the connection itself (a `password` prompt for
/// `auth_self`) this library does not show: it answers `cancel` with `no-terminal`, and
/// the permission ends undecided (``DeviceAccessError/noConsentChannel(_:reason:)``).
/// `ask` prompts never come here: devaccessd asks on the user's login terminal itself.
struct RequestConversation {
    let socketPath: String
    let timeout: Duration
    let cancellation: CallCancellation

    func run(_ order: AccessRequest) throws(DeviceAccessError) -> DecisionReply {
        // The queue number of a request this call put in the approval queue (not one an
        // earlier request of the user had put there: that is not ours to withdraw).
        var queued: Int64?
        do {
            let client = try BrokerClient(socketPath: socketPath, timeout: timeout)
            cancellation.attach(client.pollDescriptor)
            defer { cancellation.detach() }
            let id = try client.start(.request(order))
            while true {
                // No deadline: a person or an administrator may take long; devaccessd
                // bounds prompts itself, and cancellation ends the wait.
                switch try client.nextReply(to: id, timeout: nil) {
                case .prompt(let prompt):
                    try client.answer(PromptAnswer(prompt: prompt.prompt, answer: .cancel(.noTerminal)), to: id)
                case .queued(let reply):
                    if reply.new && reply.waiting { queued = reply.pending }
                case .decision(let decision):
                    return decision
                case .error(let frame):
                    throw DeviceAccessError(frame, permissions: order.permissions)
                case let other:
                    throw DeviceAccessError.protocol("a '\(other.type)' reply does not belong to a request")
                }
            }
        } catch let error as BrokerClientError {
            if cancellation.isCancelled {
                withdraw(queued)
                throw .cancelled
            }
            throw DeviceAccessError(error)
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
        guard let pending, let client = try? BrokerClient(socketPath: socketPath, timeout: timeout) else { return }
        _ = try? client.perform(.withdraw(PendingAction(pending: pending, reason: "the requesting task was cancelled")))
    }
}
