import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessProtocol
import DevAccessInterface

extension DeviceAccess {
    /// The statuses of `permissions` (nil: all) as they change: first each one as it is
    /// now, then each time one changes for the calling user (a grant, a revoke, an
    /// expiry, a policy change, a device plugged in or out, a privacy switch).
    ///
    /// devaccessd pushes the changes over a subscription (`subscribe`): nothing
    /// polls. When the subscription ends without the stream's asking (devaccessd restarts
    /// or stops, or is at its limit of subscriptions for the user), the stream subscribes
    /// again, waiting 0.1 s before the first attempt and twice as long before each next
    /// one, up to 5 s (plus up to a quarter at random, so that many programs do not come
    /// back at once). Once subscribed again it yields every status as it is then, changed
    /// or not: whatever changed while devaccessd was away is never missed, and a program
    /// that shows a status sees it confirmed. No status comes while devaccessd is away.
    ///
    /// The stream finishes only when devaccessd refuses the subscription for good (an
    /// older devaccessd without `subscribe`) or breaks the protocol. Stopping iteration
    /// (or cancelling the task that iterates) ends the subscription at once.
    public func statusUpdates(_ permissions: [Permission]? = nil) -> AsyncStream<PermissionStatus> {
        let subscriber = StatusSubscriber(socketPath: socketPath, timeout: timeout, permissions: permissions)
        return AsyncStream(bufferingPolicy: .bufferingNewest(256)) { continuation in
            continuation.onTermination = { _ in subscriber.cancellation.cancel() }
            Task {
                await DetachedThread.run(name: "DevAccess updates") {
                    _ = subscriber.run { update in
                        for status in update.permissions { continuation.yield(status) }
                    }
                    continuation.finish()
                }
            }
        }
    }
}

/// One `statusUpdates` stream's subscription, kept up across devaccessd's restarts.
struct StatusSubscriber: Sendable {
    let socketPath: String
    let timeout: Duration
    let permissions: [Permission]?
    let cancellation = CallCancellation()

    static let firstDelay: Duration = .milliseconds(100)
    static let longestDelay: Duration = .seconds(5)

    /// How one subscription ended.
    enum Ending {
        /// devaccessd went away, or was busy: subscribe again. `served`: it had answered.
        case lost(served: Bool)
        /// devaccessd will not serve this subscription (`why`); subscribing again would not help.
        case refused(BrokerClientError)
    }

    /// Subscribes, and again after each loss, until cancelled (nil) or refused for good (why).
    func run(_ yield: (StatusUpdate) -> Void) -> BrokerClientError? {
        var delay = Self.firstDelay
        while !cancellation.isCancelled {
            switch subscribeOnce(yield) {
            case .refused(let why):
                return why
            case .lost(let served):
                if served { delay = Self.firstDelay }
                let jitter = Double.random(in: 0...0.25)
                guard cancellation.sleep(for: delay + delay * jitter) else { return nil }
                delay = min(delay * 2, Self.longestDelay)
            }
        }
        return nil
    }

    /// One connection and subscription, its updates yielded until it ends.
    private func subscribeOnce(_ yield: (StatusUpdate) -> Void) -> Ending {
        var served = false
        do throws(BrokerClientError) {
            try DeviceAccess.exchange(socketPath, timeout: timeout, cancellation: cancellation) {
                session throws(BrokerClientError) in
                let id = try session.start(.subscribe(SubscribeQuery(permissions: permissions)))
                while !cancellation.isCancelled {
                    // No deadline: updates come when something changes, however long that takes.
                    switch try session.next(to: id) {
                    case .reply(.update(let update)):
                        served = true
                        yield(update)
                    case .reply(.error(let frame)):
                        throw .rejected(frame)
                    case .reply(let other):
                        throw .badReply(path: socketPath, ProtocolError(.badMessage, context: "$.type",
                                        reason: "a '\(other.type)' reply does not belong to a subscription"))
                    case .watched, .timedOut:
                        continue
                    }
                }
            }
            return .lost(served: served)
        } catch {
            switch error {
            case .unreachable, .timedOut, .closed, .io:
                return .lost(served: served)
            case .rejected(let frame) where frame.code == .busy || frame.code == .unavailable:
                // At its limit, or stopping ("subscribe again once it is back").
                return .lost(served: served)
            case .rejected, .badReply:
                return .refused(error)
            }
        }
    }
}

extension StatusSubscriber {
    /// The updates as they come, for `BrokerInterface.statusUpdates`: kept up across
    /// devaccessd's restarts as `DeviceAccess.statusUpdates`; a refusal for good fails the
    /// stream with the contract's error.
    func updates() -> StatusUpdateStream {
        let subscriber = self
        return StatusUpdateStream(AsyncThrowingStream(bufferingPolicy: .bufferingNewest(256)) { continuation in
            continuation.onTermination = { _ in subscriber.cancellation.cancel() }
            Task { () async -> Void in
                await DetachedThread.run(name: "DevAccess updates") {
                    let refused: BrokerClientError? = subscriber.run { continuation.yield($0) }
                    continuation.finish(throwing: refused.map { failure in InterfaceError(failure) })
                }
            }
        })
    }
}
