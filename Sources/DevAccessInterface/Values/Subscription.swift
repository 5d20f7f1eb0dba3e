import DevAccessCore

// Status changes pushed to a subscribed connection (`subscribe` / `update`),
// and device nodes opened by the broker for a caller whose grant allows it (`open` /
// `opened`, the descriptor passed with SCM_RIGHTS on the reply's first byte).

/// `subscribe`: keep this request open and send an `update` with the statuses of
/// `permissions` (nil: all) whenever they change for the peer's user, the first one at once.
public struct SubscribeQuery: Sendable, Hashable {
    public var permissions: [Permission]?

    public init(permissions: [Permission]? = nil) {
        self.permissions = permissions
    }
}

/// `update` (interim reply to `subscribe`): the statuses that changed, as `status` gives
/// them, and what made devaccessd look (`initial`, `decide`, `revoke`, `expiry`, `policy`,
/// `hotplug`, `process-exit`, ...; new causes may appear).
public struct StatusUpdate: Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var cause: String
    public var permissions: [PermissionStatus]

    public init(user: String, uid: UInt32, cause: String, permissions: [PermissionStatus]) {
        self.user = user
        self.uid = uid
        self.cause = cause
        self.permissions = permissions
    }
}

/// `open`: a node of device `device` (an id from `status`), opened by devaccessd for the
/// peer. `node` picks one of the device's nodes by path (nil: its first, the capture node);
/// devaccessd never opens a path that is not a node of that device as its own probe sees it.
public struct OpenOrder: Sendable, Hashable {
    public var permission: Permission
    public var device: String
    public var node: String?
    /// nil: the access the node needs (`rw-` for a capture node).
    public var access: AccessMode?

    public init(permission: Permission, device: String, node: String? = nil, access: AccessMode? = nil) {
        self.permission = permission
        self.device = device
        self.node = node
        self.access = access
    }
}

/// `opened`: the node devaccessd opened; the descriptor came with the reply's first byte.
public struct OpenedReply: Sendable, Hashable {
    public var permission: Permission
    public var device: String
    public var node: String
    public var access: AccessMode

    public init(permission: Permission, device: String, node: String, access: AccessMode) {
        self.permission = permission
        self.device = device
        self.node = node
        self.access = access
    }
}
