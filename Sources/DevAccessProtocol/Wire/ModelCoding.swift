import DevAccessCore

/// The core model in JSON: a `PermissionStatus` with its devices, nodes, kernel facts,
/// evaluations and reasons, so that a client prints exactly what a local probe would.
/// The one encoding of these models: the wire (devaccessd and the client library) and
/// `devaccess status|devices|monitor --json` both print it (docs/json.md). Encoding and
/// strict decoding side by side; a round trip gives back an equal value (tests check it).
public enum ModelCoding {
    // MARK: A status report (the wire's `status` reply, `devaccess status --json`)

    /// `user`, `uid` and `permissions`: the members of the wire's `status` reply after its
    /// envelope, and of `devaccess status --json` before its `gate`.
    public static func statusMembers(user: String, uid: UInt32, permissions: [PermissionStatus]) -> [JSONMember] {
        [JSONMember("user", .string(user)), JSONMember("uid", .integer(Int64(uid))),
         JSONMember("permissions", .array(permissions.map(encode)))]
    }

    /// Reads what `statusMembers` wrote.
    public static func decodeStatusMembers(_ reader: inout ObjectReader) throws(ProtocolError)
        -> (user: String, uid: UInt32, permissions: [PermissionStatus]) {
        (try reader.string("user", maxLength: 256), try reader.uint32("uid"),
         try reader.array("permissions", maxCount: 64, decodePermissionStatus))
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

    public static func decodePermissionStatus(_ value: JSONValue, path: String) throws(ProtocolError) -> PermissionStatus {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> PermissionStatus in
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            let status = try reader.word("status", AuthorizationStatus.allCases.map { ($0.rawValue, $0) })
            let devices = try reader.array("devices", maxCount: 256) { (value, path) throws(ProtocolError) in
                try decodeDeviceStatus(value, path: path, permission: permission)
            }
            let reasons = try reader.array("reasons", maxCount: 4096, decodeReason)
            let drift = try reader.array("drift", maxCount: 4096, decodeReason)
            let accuracy = try ConversationCoding.accuracy(&reader)
            if accuracy != nil && permission != .location {
                throw ProtocolError(.badMessage, context: reader.childPath("accuracy"),
                                    reason: "'accuracy' goes only with permission location")
            }
            return PermissionStatus(permission: permission, status: status, devices: devices, reasons: reasons,
                                    drift: drift, accuracy: accuracy)
        }
    }

    // MARK: Reason

    public static func encode(_ reason: Reason) -> JSONValue {
        .object([JSONMember("kind", .string(reason.kind.rawValue)), JSONMember("message", .string(reason.message))])
    }

    public static func decodeReason(_ value: JSONValue, path: String) throws(ProtocolError) -> Reason {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> Reason in
            Reason(Reason.Kind(rawValue: try reader.string("kind", maxLength: 64)),
                   try reader.string("message", maxLength: 16384))
        }
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

    public static func decodeDeviceStatus(_ value: JSONValue, path: String, permission: Permission) throws(ProtocolError) -> DeviceStatus {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> DeviceStatus in
            let (device, nodes) = try decodeDevice(&reader, permission: permission)
            return DeviceStatus(device: device, nodes: nodes, usable: try reader.bool("usable"))
        }
    }

    /// Reads what `encode(_: Device)` wrote: no `usable`, no node with an evaluation.
    public static func decodeDevice(_ value: JSONValue, path: String, permission: Permission) throws(ProtocolError) -> Device {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> Device in
            let (device, nodes) = try decodeDevice(&reader, permission: permission)
            if nodes.contains(where: { $0.evaluation != nil }) {
                throw ProtocolError(.badMessage, context: reader.childPath("nodes"),
                                    reason: "a device without a status has no node with an 'evaluation'")
            }
            return device
        }
    }

    private static func decodeDevice(_ reader: inout ObjectReader, permission: Permission) throws(ProtocolError)
        -> (Device, [NodeStatus]) {
        let id = try reader.string("id")
        let name = try reader.string("name")
        let driver = try reader.optionalString("driver")
        let bus = try reader.optionalString("bus")
        let service = try reader.optionalObject("service") { (service) throws(ProtocolError) -> ServiceAccess in
            ServiceAccess(name: try service.string("name"), endpoint: try service.string("endpoint"),
                          openToAllLocalUsers: try service.bool("openToAllLocalUsers"))
        }
        let details = try reader.stringMap("details")
        let nodes = try reader.array("nodes", maxCount: 256, decodeNodeStatus)
        let device = Device(permission: permission, id: id, name: name, driver: driver, bus: bus,
                            nodes: nodes.map(\.node), route: service.map { .service($0) } ?? .nodes, details: details)
        return (device, nodes)
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

    public static func decodeAdapterReport(_ value: JSONValue, path: String) throws(ProtocolError) -> AdapterReport {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> AdapterReport in
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            let devices = try reader.array("devices", maxCount: 256) { (value, path) throws(ProtocolError) in
                try decodeDevice(value, path: path, permission: permission)
            }
            return AdapterReport(permission: permission, devices: devices,
                                 unavailableReason: try reader.optionalString("unavailableReason", maxLength: 16384),
                                 notes: try reader.array("notes", maxCount: 4096, decodeReason))
        }
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

    public static func decodeNodeStatus(_ value: JSONValue, path: String) throws(ProtocolError) -> NodeStatus {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> NodeStatus in
            let nodePath = try reader.string("path")
            let role = try reader.string("role", maxLength: 64)
            let required = try Strict.accessMode(try reader.required("required"), path: reader.childPath("required"))
            let state: DeviceNode.State
            switch (reader.has("facts"), reader.has("problem")) {
            case (true, false):
                state = .present(try decodeFacts(try reader.required("facts"), path: reader.childPath("facts")))
            case (false, true):
                state = .unusable(try reader.string("problem"))
            default:
                throw ProtocolError(.badMessage, context: path, reason: "a node has exactly one of 'facts' and 'problem'")
            }
            let evaluation = try reader.optional("evaluation").map { (value) throws(ProtocolError) in
                try decodeEvaluation(value, path: reader.childPath("evaluation"))
            }
            return NodeStatus(node: DeviceNode(path: nodePath, role: role, required: required, state: state),
                              evaluation: evaluation)
        }
    }

    // MARK: NodeFacts

    static let kinds: [(String, NodeFacts.FileKind)] = [
        ("characterDevice", .characterDevice), ("blockDevice", .blockDevice), ("regular", .regular),
        ("directory", .directory), ("symlink", .symlink), ("other", .other),
    ]

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

    public static func decodeFacts(_ value: JSONValue, path: String) throws(ProtocolError) -> NodeFacts {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> NodeFacts in
            NodeFacts(path: try reader.string("path"), kind: try reader.word("kind", kinds),
                      major: try reader.uint32("major"), minor: try reader.uint32("minor"),
                      ownerUID: try reader.uint32("ownerUID"), ownerName: try reader.optionalString("ownerName", maxLength: 256),
                      groupGID: try reader.uint32("groupGID"), groupName: try reader.optionalString("groupName", maxLength: 256),
                      mode: UInt32(try reader.integer("mode", in: 0...0o7777)),
                      acl: try reader.optionalArray("acl", maxCount: 1024, decodeACLEntry))
        }
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

    public static func decodeACLEntry(_ value: JSONValue, path: String) throws(ProtocolError) -> ACLEntry {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> ACLEntry in
            let tagName = try reader.word("tag", [("user_obj", 0), ("user", 1), ("group_obj", 2), ("group", 3),
                                                  ("mask", 4), ("other", 5)])
            let tag: ACLEntry.Tag
            switch tagName {
            case 1: tag = .user(try reader.uint32("qualifier"))
            case 3: tag = .group(try reader.uint32("qualifier"))
            case 0: tag = .userObject
            case 2: tag = .groupObject
            case 4: tag = .mask
            default: tag = .other
            }
            let name = try reader.optionalString("name", maxLength: 256)
            let permissions = try Strict.accessMode(try reader.required("permissions"), path: reader.childPath("permissions"))
            return ACLEntry(tag: tag, permissions: permissions, qualifierName: name)
        }
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

    public static func decodeEvaluation(_ value: JSONValue, path: String) throws(ProtocolError) -> AccessEvaluator.Result {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> AccessEvaluator.Result in
            let access = try Strict.accessMode(try reader.required("access"), path: reader.childPath("access"))
            let sourceName = try reader.word("source", [("superuser", 0), ("owner", 1), ("namedUser", 2),
                                                        ("groupClass", 3), ("other", 4)])
            let source: AccessEvaluator.Source
            switch sourceName {
            case 0: source = .superuser
            case 1: source = .owner
            case 2: source = .namedUser(uid: try reader.uint32("uid"))
            case 3: source = .groupClass(matching: try reader.array("groups", maxCount: 65536, Strict.uint32))
            default: source = .other
            }
            let maskedOut = try Strict.accessMode(try reader.required("maskedOut"), path: reader.childPath("maskedOut"))
            var separately: AccessMode?
            if let value = reader.optional("separately") {
                separately = try Strict.accessMode(value, path: reader.childPath("separately"))
            }
            return AccessEvaluator.Result(access: access, decidedBy: source, maskedOut: maskedOut, separately: separately)
        }
    }
}
