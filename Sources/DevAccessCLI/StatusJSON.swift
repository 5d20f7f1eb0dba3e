import DevAccessCore
import DevAccessInterface

/// `status`, `devices` and `request --json`: the models in their one encoding, the wire's
/// (ModelCoding), printed with the protocol's writer, indented for people (docs/json.md).
enum StatusJSON {
    /// The wire's `status` reply without its envelope, and the local `gate` when there is one.
    static func status(user: String, uid: UInt32, permissions: [PermissionStatus], gate: GateReport?) -> String {
        var members = ModelCoding.statusMembers(user: user, uid: uid, permissions: permissions)
        if let gate { members.append(JSONMember("gate", encode(gate))) }
        return JSONWriter.indented(.object(members))
    }

    /// What the hardware shows, per permission: devices without a status (no `usable`, no `evaluation`).
    static func devices(_ reports: [AdapterReport]) -> String {
        JSONWriter.indented(.object([JSONMember("permissions", .array(reports.map(ModelCoding.encode)))]))
    }

    /// The wire's `decision` reply without its envelope.
    static func decision(_ decision: DecisionReply) -> String {
        JSONWriter.indented(.object(ConversationCoding.encode(decision)))
    }

    /// `approve` and `reject --json`: the wire's `resolved` reply without its envelope.
    static func resolved(_ resolved: ResolvedReply) -> String {
        JSONWriter.indented(.object(ConversationCoding.encode(resolved)))
    }

    /// `GateReport` as JSON (docs/json.md, "gate"). The gate is computed and printed only
    /// here (devaccessd does not send it), so its encoder lives beside its one printer.
    static func encode(_ report: GateReport) -> JSONValue {
        let rules = report.denyByDefault
        var denyByDefault = [JSONMember("file", .string(DenyByDefaultRules.fileName))]
        if let installed = rules.installed { denyByDefault.append(JSONMember("installed", .string(installed))) }
        if let active = rules.active { denyByDefault.append(JSONMember("active", .bool(active))) }
        denyByDefault.append(JSONMember("message", .string(rules.message)))
        return .object([
            JSONMember("effective", .bool(report.isEffective)),
            JSONMember("summary", .string(report.summary)),
            JSONMember("denyByDefault", .object(denyByDefault)),
            JSONMember("nodes", .array(report.nodes.map { node in
                .object([
                    JSONMember("node", .string(node.path)),
                    JSONMember("permission", .string(node.permission.rawValue)),
                    JSONMember("device", .string(node.deviceID)),
                    JSONMember("without", .array(node.openers.map(encode))),
                ])
            })),
        ])
    }

    private static func encode(_ opener: GateOpener) -> JSONValue {
        var members = [JSONMember("kind", .string(opener.kind.rawValue))]
        if !opener.name.isEmpty { members.append(JSONMember("name", .string(opener.name))) }
        if let names = opener.members { members.append(JSONMember("members", .array(names.map { .string($0) }))) }
        members.append(JSONMember("access", .string(opener.access.symbolic)))
        if let devaccess = opener.devaccess { members.append(JSONMember("devaccess", .bool(devaccess))) }
        members.append(JSONMember("message", .string(opener.message)))
        return .object(members)
    }
}
