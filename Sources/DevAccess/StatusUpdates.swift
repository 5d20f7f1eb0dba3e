import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessProtocol

extension DeviceAccess {
    /// The statuses of `permissions` (nil: all) as they change: first each one as it is
    /// now, then each time one changes for the calling user (a grant, a revoke, an
    /// expiry, a policy change, a device plugged in or out, a privacy switch).
    ///
    /// devaccessd pushes the changes over a subscription (protocol version 7): nothing
    /// polls. The stream finishes when devaccessd cannot be reached, refuses the
    /// subscription (a user holds a few at most), or stops; subscribe again then.
    /// Stopping iteration (or cancelling the task that iterates) ends the subscription.
    public func statusUpdates(_ permissions: [Permission]? = nil) -> AsyncStream<PermissionStatus> {
        let socketPath = self.socketPath, timeout = self.timeout
        let cancellation = CallCancellation()
        return AsyncStream(bufferingPolicy: .bufferingNewest(256)) { continuation in
            continuation.onTermination = { _ in cancellation.cancel() }
            DetachedThread.start(name: "DevAccess updates") {
                defer { continuation.finish() }
                guard let client = try? BrokerClient(socketPath: socketPath, timeout: timeout) else { return }
                cancellation.attach(client.pollDescriptor)
                defer { cancellation.detach() }
                guard let id = try? client.start(.subscribe(SubscribeQuery(permissions: permissions))) else { return }
                while !cancellation.isCancelled {
                    // No deadline: updates come when something changes, however long that takes.
                    guard case .update(let update)? = try? client.nextReply(to: id, timeout: nil) else { return }
                    for status in update.permissions { continuation.yield(status) }
                }
            }
        }
    }
}
