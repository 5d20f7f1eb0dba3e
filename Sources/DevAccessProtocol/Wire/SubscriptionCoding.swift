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

enum SubscriptionCoding {
    static func encode(_ query: SubscribeQuery) -> [JSONMember] {
        guard let permissions = query.permissions else { return [] }
        return [JSONMember("permissions", .array(permissions.map { .string($0.rawValue) }))]
    }

    static func decodeQuery(_ reader: inout ObjectReader) throws(ProtocolError) -> SubscribeQuery {
        let permissions = try reader.optional("permissions").map { (value) throws(ProtocolError) in
            try Strict.permissions(value, path: "$.permissions")
        }
        return SubscribeQuery(permissions: permissions)
    }

    static func encode(_ update: StatusUpdate) -> [JSONMember] {
        [JSONMember("user", .string(update.user)), JSONMember("uid", .integer(Int64(update.uid))),
         JSONMember("cause", .string(update.cause)),
         JSONMember("permissions", .array(update.permissions.map(ModelCoding.encode)))]
    }

    static func decodeUpdate(_ reader: inout ObjectReader) throws(ProtocolError) -> StatusUpdate {
        StatusUpdate(user: try reader.string("user", maxLength: 256), uid: try reader.uint32("uid"),
                     cause: try reader.string("cause", maxLength: 256),
                     permissions: try reader.array("permissions", maxCount: 64, ModelCoding.decodePermissionStatus))
    }

    static func encode(_ order: OpenOrder) -> [JSONMember] {
        var members = [JSONMember("permission", .string(order.permission.rawValue)),
                       JSONMember("device", .string(order.device))]
        if let node = order.node { members.append(JSONMember("node", .string(node))) }
        if let access = order.access { members.append(JSONMember("access", .string(access.symbolic))) }
        return members
    }

    static func decodeOrder(_ reader: inout ObjectReader) throws(ProtocolError) -> OpenOrder {
        let permission = try Strict.permission(try reader.required("permission"), path: "$.permission")
        let device = try reader.string("device", maxLength: 1024)
        let node = try reader.optionalString("node", maxLength: 4096)
        let access = try reader.optional("access").map { (value) throws(ProtocolError) in
            try Strict.accessMode(value, path: "$.access")
        }
        if let access, access.isEmpty || access.contains(.execute) {
            throw ProtocolError(.badMessage, context: "$.access", reason: "a node opens for reading, writing or both: "
                + "'r--', '-w-' or 'rw-'")
        }
        return OpenOrder(permission: permission, device: device, node: node, access: access)
    }

    static func encode(_ opened: OpenedReply) -> [JSONMember] {
        [JSONMember("permission", .string(opened.permission.rawValue)), JSONMember("device", .string(opened.device)),
         JSONMember("node", .string(opened.node)), JSONMember("access", .string(opened.access.symbolic))]
    }

    static func decodeOpened(_ reader: inout ObjectReader) throws(ProtocolError) -> OpenedReply {
        OpenedReply(permission: try Strict.permission(try reader.required("permission"), path: "$.permission"),
                    device: try reader.string("device", maxLength: 1024), node: try reader.string("node"),
                    access: try Strict.accessMode(try reader.required("access"), path: "$.access"))
    }
}
