import DevAccessCore

/// The core model in JSON: a `PermissionStatus` with its devices, nodes, kernel facts,
/// evaluations and reasons, so that a client prints exactly what a local probe would.
/// The one encoding of these models: the wire (devaccessd and the client library) and
/// `devaccess status|devices|monitor --json` both print it (docs/json.md). Its strict
/// decoding is the wire's (DevAccessProtocol, Wire/ModelCoding.swift); a round trip gives
/// back an equal value (tests check it).
public enum ModelCoding {
    // MARK: A status report (the wire's `status` reply, `devaccess status --json`)

    /// `user`, `uid` and `permissions`: the members of the wire's `status` reply after its
    /// envelope, and of `devaccess status --json` before its `gate`.
    public static func statusMembers(user: String, uid: UInt32, permissions: [PermissionStatus]) -> [JSONMember] {
        [JSONMember("user", .string(user)), JSONMember("uid", .integer(Int64(uid))),
         JSONMember("permissions", .array(permissions.map(encode)))]
    }

    // MARK: PermissionStatus

    public static func encode(_ status: PermissionStatus) -> JSONValue {
        var members = [
            JSONMember("permission", .string(status.permission.rawValue)),
            JSONMember("status", .string(status.status.rawValue)),
        ]
        if let accuracy = status.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
        members += [
            JSONMember("devices", .array(status.devices.map(encode))),
            JSONMember("reasons", .array(status.reasons.map(encode))),
            JSONMember("drift", .array(status.drift.map(encode))),
        ]
        return .object(members)
    }

    // MARK: Reason

    public static func encode(_ reason: Reason) -> JSONValue {
        .object([JSONMember("kind", .string(reason.kind.rawValue)), JSONMember("message", .string(reason.message))])
    }

    // MARK: Device, alone (`devaccess devices`) and with its status

    /// A device as the hardware shows it: its nodes' facts, no evaluation, no `usable`.
    public static func encode(_ device: Device) -> JSONValue {
        encode(device, usable: nil, nodes: device.nodes.map { NodeStatus(node: $0, evaluation: nil) })
    }

    public static func encode(_ status: DeviceStatus) -> JSONValue {
        encode(status.device, usable: status.usable, nodes: status.nodes)
    }

    /// The one device object: `usable` only with a status; each node with its evaluation when it has one.
    private static func encode(_ device: Device, usable: Bool?, nodes: [NodeStatus]) -> JSONValue {
        var members = [JSONMember("id", .string(device.id)), JSONMember("name", .string(device.name))]
        if let driver = device.driver { members.append(JSONMember("driver", .string(driver))) }
        if let bus = device.bus { members.append(JSONMember("bus", .string(bus))) }
        if let usable { members.append(JSONMember("usable", .bool(usable))) }
        if case .service(let service) = device.route {
            members.append(JSONMember("service", .object([
                JSONMember("name", .string(service.name)),
                JSONMember("endpoint", .string(service.endpoint)),
                JSONMember("openToAllLocalUsers", .bool(service.openToAllLocalUsers)),
            ])))
        }
        members.append(JSONMember("details", .object(device.details.sorted { $0.key < $1.key }.map {
            JSONMember($0.key, .string($0.value))
        })))
        members.append(JSONMember("nodes", .array(nodes.map(encode))))
        return .object(members)
    }

    // MARK: What the hardware shows for a permission (`devaccess devices`)

    public static func encode(_ report: AdapterReport) -> JSONValue {
        var members = [JSONMember("permission", .string(report.permission.rawValue))]
        if let why = report.unavailableReason { members.append(JSONMember("unavailableReason", .string(why))) }
        members += [
            JSONMember("devices", .array(report.devices.map(encode))),
            JSONMember("notes", .array(report.notes.map(encode))),
        ]
        return .object(members)
    }

    // MARK: Node with its evaluation

    public static func encode(_ status: NodeStatus) -> JSONValue {
        let node = status.node
        var members = [
            JSONMember("path", .string(node.path)),
            JSONMember("role", .string(node.role)),
            JSONMember("required", .string(node.required.wireText)),
        ]
        switch node.state {
        case .present(let facts): members.append(JSONMember("facts", encode(facts)))
        case .unusable(let why): members.append(JSONMember("problem", .string(why)))
        }
        if let evaluation = status.evaluation { members.append(JSONMember("evaluation", encode(evaluation))) }
        return .object(members)
    }

    // MARK: NodeFacts

    public static func encode(_ facts: NodeFacts) -> JSONValue {
        var members = [
            JSONMember("path", .string(facts.path)),
            JSONMember("kind", .string(facts.kind.rawValue)),
            JSONMember("major", .integer(Int64(facts.major))),
            JSONMember("minor", .integer(Int64(facts.minor))),
            JSONMember("ownerUID", .integer(Int64(facts.ownerUID))),
        ]
        if let name = facts.ownerName { members.append(JSONMember("ownerName", .string(name))) }
        members.append(JSONMember("groupGID", .integer(Int64(facts.groupGID))))
        if let name = facts.groupName { members.append(JSONMember("groupName", .string(name))) }
        members.append(JSONMember("mode", .integer(Int64(facts.mode))))
        if let acl = facts.acl { members.append(JSONMember("acl", .array(acl.map(encode)))) }
        return .object(members)
    }

    // MARK: ACL entries, with libacl's tag names

    public static func encode(_ entry: ACLEntry) -> JSONValue {
        var members: [JSONMember]
        switch entry.tag {
        case .userObject: members = [JSONMember("tag", .string("user_obj"))]
        case .user(let uid): members = [JSONMember("tag", .string("user")), JSONMember("qualifier", .integer(Int64(uid)))]
        case .groupObject: members = [JSONMember("tag", .string("group_obj"))]
        case .group(let gid): members = [JSONMember("tag", .string("group")), JSONMember("qualifier", .integer(Int64(gid)))]
        case .mask: members = [JSONMember("tag", .string("mask"))]
        case .other: members = [JSONMember("tag", .string("other"))]
        }
        if let name = entry.qualifierName { members.append(JSONMember("name", .string(name))) }
        members.append(JSONMember("permissions", .string(entry.permissions.wireText)))
        return .object(members)
    }

    // MARK: Evaluation

    public static func encode(_ result: AccessEvaluator.Result) -> JSONValue {
        var members = [JSONMember("access", .string(result.access.wireText))]
        switch result.decidedBy {
        case .superuser: members.append(JSONMember("source", .string("superuser")))
        case .owner: members.append(JSONMember("source", .string("owner")))
        case .namedUser(let uid):
            members.append(JSONMember("source", .string("namedUser")))
            members.append(JSONMember("uid", .integer(Int64(uid))))
        case .groupClass(let gids):
            members.append(JSONMember("source", .string("groupClass")))
            members.append(JSONMember("groups", .array(gids.map { .integer(Int64($0)) })))
        case .other: members.append(JSONMember("source", .string("other")))
        }
        members.append(JSONMember("maskedOut", .string(result.maskedOut.wireText)))
        if result.readWriteOnlySeparately {
            members.append(JSONMember("separately", .string(result.separately.wireText)))
        }
        return .object(members)
    }
}

extension AccessMode {
    /// The `rwx` text the protocol uses (exact, unlike the `read`/`readwrite` words).
    var wireText: String { symbolic }
}
