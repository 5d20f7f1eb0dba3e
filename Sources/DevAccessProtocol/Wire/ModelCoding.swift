import DevAccessCore
import DevAccessInterface

/// Strict decoding of the core model's JSON (its encoding: DevAccessInterface,
/// JSON/ModelCoding.swift), by the rules in StrictReader.swift.
extension ModelCoding {
    /// Reads what `statusMembers` wrote.
    public static func decodeStatusMembers(_ reader: inout ObjectReader) throws(ProtocolError)
        -> (user: String, uid: UInt32, permissions: [PermissionStatus]) {
        (try reader.string("user", maxLength: 256), try reader.uint32("uid"),
         try reader.array("permissions", maxCount: 64, decodePermissionStatus))
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

    public static func decodeReason(_ value: JSONValue, path: String) throws(ProtocolError) -> Reason {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> Reason in
            Reason(Reason.Kind(rawValue: try reader.string("kind", maxLength: 64)),
                   try reader.string("message", maxLength: 16384))
        }
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

    static let kinds: [(String, NodeFacts.FileKind)] = [
        ("characterDevice", .characterDevice), ("blockDevice", .blockDevice), ("regular", .regular),
        ("directory", .directory), ("symlink", .symlink), ("other", .other),
    ]

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
