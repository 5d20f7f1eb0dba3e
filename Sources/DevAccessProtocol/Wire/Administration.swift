import DevAccessCore

// Version 3: the operations that decide or record for someone (docs/protocol.md,
// "Administration"). The broker serves them to root and members of the admin group,
// and to any user for their own decisions and pending requests; everything else is
// refused and audited. Their results travel as `result` replies whose `document` is
// the operation's documented JSON (docs/json.md): the wire and `--json` share one shape.

/// `decide`: record an allow or a deny for `user` and apply it to the nodes.
public struct DecisionOrder: Sendable, Hashable {
    /// true: allow (`devaccess grant`); false: deny.
    public var allow: Bool
    public var permission: Permission
    /// A user name or a decimal uid.
    public var user: String
    /// nil: every device of the permission.
    public var device: String?
    /// nil: until revoked; else when the decision ends, in milliseconds since 1970 UTC.
    public var expiresMilliseconds: Int64?
    public var reason: String?

    public init(allow: Bool, permission: Permission, user: String, device: String? = nil,
                expiresMilliseconds: Int64? = nil, reason: String? = nil) {
        self.allow = allow
        self.permission = permission
        self.user = user
        self.device = device
        self.expiresMilliseconds = expiresMilliseconds
        self.reason = reason
    }
}

/// `revoke`: end a user's allow grants of a permission (for one device when given).
public struct RevokeOrder: Sendable, Hashable {
    public var permission: Permission
    /// A user name or a decimal uid (a deleted account's uid is accepted).
    public var user: String
    public var device: String?
    public var reason: String?

    public init(permission: Permission, user: String, device: String? = nil, reason: String? = nil) {
        self.permission = permission
        self.user = user
        self.device = device
        self.reason = reason
    }
}

/// `reset`: forget a user's decisions (of one permission, or all).
public struct ResetOrder: Sendable, Hashable {
    public var user: String
    public var permission: Permission?

    public init(user: String, permission: Permission? = nil) {
        self.user = user
        self.permission = permission
    }
}

/// `list`: decisions in the ledger. `user` nil: everyone's for an admin, the peer's own
/// for anyone else.
public struct ListQuery: Sendable, Hashable {
    public var user: String?
    public var permission: Permission?
    /// Also decisions that ended (revoked, expired).
    public var all: Bool

    public init(user: String? = nil, permission: Permission? = nil, all: Bool = false) {
        self.user = user
        self.permission = permission
        self.all = all
    }
}

/// `audit-verify`: the ledger's chain, and with `archive` also that archive file's chain
/// and its link to the ledger.
public struct AuditVerifyQuery: Sendable, Hashable {
    /// An archive file's path. The broker opens only archives the ledger records, unless
    /// the peer is root.
    public var archive: String?

    public init(archive: String? = nil) {
        self.archive = archive
    }
}

/// `audit-archive`: move the audit events older than `beforeMilliseconds` to a new archive
/// file, at `to` (root only) or in the state directory.
public struct AuditArchiveOrder: Sendable, Hashable {
    /// Milliseconds since 1970 UTC.
    public var beforeMilliseconds: Int64
    public var to: String?

    public init(beforeMilliseconds: Int64, to: String? = nil) {
        self.beforeMilliseconds = beforeMilliseconds
        self.to = to
    }
}

/// The answer to every version 3 operation: its result document.
public struct OperationResult: Sendable, Hashable {
    /// The request type this answers (`decide`, `list`, ...).
    public var operation: String
    /// A JSON object, documented per operation in docs/json.md.
    public var document: JSONValue

    public init(operation: String, document: JSONValue) {
        self.operation = operation
        self.document = document
    }
}

enum AdministrationCoding {
    static let maxName = 256
    static let maxReason = 1024
    static let maxPath = 4096
    /// Year 9999: far beyond any grant, and exact in a double.
    static let maxMilliseconds: Int64 = 253_402_300_799_000

    static func encode(_ request: Request) -> [JSONMember] {
        var members: [JSONMember] = []
        func add(_ key: String, _ text: String?) { if let text { members.append(JSONMember(key, .string(text))) } }
        switch request {
        case .decide(let order):
            members.append(JSONMember("decision", .string(order.allow ? "allow" : "deny")))
            members.append(JSONMember("permission", .string(order.permission.rawValue)))
            add("user", order.user)
            add("device", order.device)
            if let expires = order.expiresMilliseconds { members.append(JSONMember("expires", .integer(expires))) }
            add("reason", order.reason)
        case .revoke(let order):
            members.append(JSONMember("permission", .string(order.permission.rawValue)))
            add("user", order.user)
            add("device", order.device)
            add("reason", order.reason)
        case .reset(let order):
            add("user", order.user)
            add("permission", order.permission?.rawValue)
        case .list(let query):
            add("user", query.user)
            add("permission", query.permission?.rawValue)
            if query.all { members.append(JSONMember("all", .bool(true))) }
        case .withdraw(let action):
            members.append(JSONMember("pending", .integer(action.pending)))
            add("reason", action.reason)
        case .auditVerify(let query):
            add("archive", query.archive)
        case .auditArchive(let order):
            members.append(JSONMember("before", .integer(order.beforeMilliseconds)))
            add("to", order.to)
        case .reconcile:
            break
        default:
            break
        }
        return members
    }

    /// Reads the body of a version 3 request of `type`; nil when `type` is not one of them.
    static func decode(_ type: String, _ reader: inout ObjectReader) throws(ProtocolError) -> Request? {
        switch type {
        case "decide":
            let allow = try reader.word("decision", [("allow", true), ("deny", false)])
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            let user = try name("user", &reader)
            let device = try optionalName("device", &reader)
            let expires = try reader.optionalInteger("expires", in: 1...maxMilliseconds)
            let reason = try reader.optionalString("reason", maxLength: maxReason)
            return .decide(DecisionOrder(allow: allow, permission: permission, user: user, device: device,
                                         expiresMilliseconds: expires, reason: reason))
        case "revoke":
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            return .revoke(RevokeOrder(permission: permission, user: try name("user", &reader),
                                       device: try optionalName("device", &reader),
                                       reason: try reader.optionalString("reason", maxLength: maxReason)))
        case "reset":
            let user = try name("user", &reader)
            let permission = try reader.optional("permission").map { (value) throws(ProtocolError) in
                try Strict.permission(value, path: reader.childPath("permission"))
            }
            return .reset(ResetOrder(user: user, permission: permission))
        case "list":
            let user = try optionalName("user", &reader)
            let permission = try reader.optional("permission").map { (value) throws(ProtocolError) in
                try Strict.permission(value, path: reader.childPath("permission"))
            }
            let all = try reader.optional("all").map { (value) throws(ProtocolError) in
                try Strict.bool(value, path: reader.childPath("all"))
            } ?? false
            return .list(ListQuery(user: user, permission: permission, all: all))
        case "withdraw":
            let pending = try reader.integer("pending", in: 1...BrokerProtocol.requestIDs.upperBound)
            return .withdraw(PendingAction(pending: pending, reason: try reader.optionalString("reason", maxLength: maxReason)))
        case "reconcile":
            return .reconcile
        case "audit-verify":
            return .auditVerify(AuditVerifyQuery(archive: try optionalPath("archive", &reader)))
        case "audit-archive":
            let before = try reader.integer("before", in: 0...maxMilliseconds)
            return .auditArchive(AuditArchiveOrder(beforeMilliseconds: before, to: try optionalPath("to", &reader)))
        default:
            return nil
        }
    }

    private static func name(_ key: String, _ reader: inout ObjectReader) throws(ProtocolError) -> String {
        let text = try reader.string(key, maxLength: maxName)
        guard !text.isEmpty else {
            throw ProtocolError(.badMessage, context: reader.childPath(key), reason: "'\(key)' is empty")
        }
        return text
    }

    /// An absolute path, at most `maxPath` bytes, without NUL.
    private static func optionalPath(_ key: String, _ reader: inout ObjectReader) throws(ProtocolError) -> String? {
        guard let text = try reader.optionalString(key, maxLength: maxPath) else { return nil }
        guard text.hasPrefix("/"), !text.contains("\0") else {
            throw ProtocolError(.badMessage, context: reader.childPath(key), reason: "'\(key)' is not an absolute path")
        }
        return text
    }

    private static func optionalName(_ key: String, _ reader: inout ObjectReader) throws(ProtocolError) -> String? {
        guard reader.has(key) else { return nil }
        return try name(key, &reader)
    }
}
