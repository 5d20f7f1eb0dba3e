import Glibc
import Synchronization
import DevAccessCore
import DevAccessProtocol
import DevAccessInterface

/// A device node devaccessd opened for this program (``DeviceAccess/open(_:device:node:access:)``).
/// The descriptor is closed when this goes away, unless taken with ``takeDescriptor()``.
public final class DeviceFile: Sendable {
    /// The device's id, as `status` lists it, and the node that was opened.
    public let device: String
    public let node: String
    public let access: AccessMode
    private let descriptor: Mutex<CInt?>

    init(device: String, node: String, access: AccessMode, descriptor: CInt) {
        self.device = device
        self.node = node
        self.access = access
        self.descriptor = Mutex(descriptor)
    }

    /// The open descriptor (blocking, close-on-exec), or nil once taken or closed.
    public var rawValue: CInt? { descriptor.withLock { $0 } }

    /// Hands the descriptor over: the caller closes it from now on.
    public func takeDescriptor() -> CInt? {
        descriptor.withLock { descriptor in
            defer { descriptor = nil }
            return descriptor
        }
    }

    public func close() {
        if let taken = takeDescriptor() { _ = Glibc.close(taken) }
    }

    deinit { close() }
}

extension DeviceAccess {
    /// Has devaccessd open a node of `device` (an id from ``status(_:)``) and hand over the
    /// descriptor: the portal model, so this program needs no ACL entry on the node, only a
    /// grant (request one first). devaccessd records each open in its audit trail.
    ///
    /// - Parameters:
    ///   - node: one of the device's node paths (nil: its first, the capture node).
    ///   - access: nil: what the node needs (read and write for a camera).
    /// - Throws: `.denied` without a grant for the device (or the policy or a privacy
    ///   switch forbids it), `.unsupported` when no such device is present.
    public func open(_ permission: Permission, device: String, node: String? = nil,
                     access: AccessMode? = nil) async throws(DeviceAccessError) -> DeviceFile {
        let socketPath = self.socketPath, timeout = self.timeout
        let order = OpenOrder(permission: permission, device: device, node: node, access: access)
        return try await offload { cancellation throws(DeviceAccessError) in
            do throws(BrokerClientError) {
                let (reply, descriptor) = try Self.exchange(socketPath, timeout: timeout,
                                                            cancellation: cancellation) { session throws(BrokerClientError) in
                    try session.open(order)
                }
                return DeviceFile(device: reply.device, node: reply.node, access: reply.access, descriptor: descriptor)
            } catch {
                if cancellation.isCancelled { throw .cancelled }
                if case .rejected(let frame) = error, frame.code == .badArgument {
                    throw .unsupported(permission, reason: frame.reason)
                }
                throw DeviceAccessError(error, permission: permission)
            }
        }
    }
}
