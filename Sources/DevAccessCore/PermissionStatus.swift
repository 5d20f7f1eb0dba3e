/// The status of one permission for one user, with everything that explains it.
public struct PermissionStatus: Sendable, Hashable {
    public var permission: Permission
    public var status: AuthorizationStatus
    public var devices: [DeviceStatus]
    public var reasons: [Reason]
    /// Disagreements between the ledger and kernel state.
    public var drift: [Reason]
    /// Location: how precisely devaccess tells the user where the machine is (their finest
    /// standing grant or the policy's allow, capped by `MaxAccuracy=`); nil for the other
    /// permissions and when the user may not be told at all.
    public var accuracy: LocationAccuracy?

    public init(permission: Permission, status: AuthorizationStatus, devices: [DeviceStatus],
                reasons: [Reason], drift: [Reason] = [], accuracy: LocationAccuracy? = nil) {
        self.permission = permission
        self.status = status
        self.devices = devices
        self.reasons = reasons
        self.drift = drift
        self.accuracy = accuracy
    }
}

public struct DeviceStatus: Sendable, Hashable {
    public var device: Device
    public var nodes: [NodeStatus]
    /// The user can use the device now: every node opens with the access it needs,
    /// or the service that serves it is open to the user.
    public var usable: Bool

    public init(device: Device, nodes: [NodeStatus], usable: Bool) {
        self.device = device
        self.nodes = nodes
        self.usable = usable
    }
}

public struct NodeStatus: Sendable, Hashable {
    public var node: DeviceNode
    /// Nil when the node could not be examined.
    public var evaluation: AccessEvaluator.Result?

    public init(node: DeviceNode, evaluation: AccessEvaluator.Result?) {
        self.node = node
        self.evaluation = evaluation
    }

    public var access: AccessMode { evaluation?.access ?? .none }
    public var sufficient: Bool { evaluation != nil && access.isSuperset(of: node.required) }
}
