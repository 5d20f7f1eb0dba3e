import DevAccessCore
import DevAccessInterface

// The wire form of `subscribe`/`update` and `open`/`opened` (the values: DevAccessInterface,
// Values/Subscription.swift).
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
