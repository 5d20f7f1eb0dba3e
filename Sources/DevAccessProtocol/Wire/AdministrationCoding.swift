import DevAccessCore

// The operations that decide or record for someone (docs/protocol.md,
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
    /// `--for`: the decision ends this many seconds after devaccessd records it. Counted by
    /// the recorder's clock, not the sender's, so the time a request spends on its way (or
    /// waiting for the engine) is not taken off the term. Excludes `expiresMilliseconds`.
    public var lastingSeconds: Int64?
    public var reason: String?
    /// A program grant: only runs of this program (`devaccess run`) by the user
    /// use it. An absolute path; nil: the user's every program.
    public var program: String?
    /// A grant of location: how precisely the user is told where the machine is (wire
    /// `accuracy`); nil: exact. Only with `allow` and `location`.
    public var accuracy: LocationAccuracy?

    public init(allow: Bool, permission: Permission, user: String, device: String? = nil,
                expiresMilliseconds: Int64? = nil, lastingSeconds: Int64? = nil, reason: String? = nil,
                program: String? = nil, accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.program = program
        self.lastingSeconds = lastingSeconds
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
    /// Only the program grants of this program; nil: every allow grant.
    public var program: String?
    /// Also end the runs (`devaccess run`) the revoked grants served.
    public var terminate: Bool

    public init(permission: Permission, user: String, device: String? = nil, reason: String? = nil,
                program: String? = nil, terminate: Bool = false) {
        self.program = program
        self.terminate = terminate
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

/// `audit-report`: the audit events matching the filters, a page at a time (`events`),
/// their counts (`summary`), or one event with its place in the chain (`event`). Times are
/// milliseconds since 1970 UTC; the client resolves words like `today` in its own time zone.
public struct AuditReportQuery: Sendable, Hashable {
    public enum Mode: String, Sendable, Hashable, CaseIterable {
        case events, summary, event
    }

    public var mode: Mode
    public var sinceMilliseconds: Int64?
    public var untilMilliseconds: Int64?
    /// A user name or a decimal uid: events about or caused by that user.
    public var user: String?
    /// A program's full path, or its file name.
    public var program: String?
    public var permission: Permission?
    /// A device's stable id or recorded name.
    public var device: String?
    /// Event types; empty: all.
    public var types: [String]
    /// `events`: only events with a larger seq (the cursor of the previous page).
    public var after: Int64
    /// `events`: at most this many (the broker may return fewer to stay under the reply limit).
    public var limit: Int64?
    /// `event`: its seq.
    public var event: Int64?
    /// Walk the hash chain and report its state in the document (a report's first page).
    public var verify: Bool
    /// `events`: only what the HTML timeline draws (of the details only the keys it reads,
    /// `AuditTimelineEvent.detailKeys`; no hashes, no node): a fraction of the reading and of the reply.
    public var timeline: Bool
    /// `events` (`--follow`): when nothing after `after` matches, hold the reply up to this
    /// many seconds until an event is written, then read again (1...`maxWait`).
    public var waitSeconds: Int64?
    /// Archive files (absolute paths, of `audit --archive`) whose events the report includes,
    /// each with its own chain checked.
    public var archives: [String]

    public init(mode: Mode, sinceMilliseconds: Int64? = nil, untilMilliseconds: Int64? = nil, user: String? = nil,
                program: String? = nil, permission: Permission? = nil, device: String? = nil, types: [String] = [],
                after: Int64 = 0, limit: Int64? = nil, event: Int64? = nil, verify: Bool = true,
                timeline: Bool = false, waitSeconds: Int64? = nil, archives: [String] = []) {
        self.mode = mode
        self.sinceMilliseconds = sinceMilliseconds
        self.untilMilliseconds = untilMilliseconds
        self.user = user
        self.program = program
        self.permission = permission
        self.device = device
        self.types = types
        self.after = after
        self.limit = limit
        self.event = event
        self.verify = verify
        self.timeline = timeline
        self.waitSeconds = waitSeconds
        self.archives = archives
    }

    /// The most events one page holds.
    public static let maxLimit: Int64 = 1000
    /// The longest a follow request is held (well inside the client's 60 s reply timeout).
    public static let maxWait: Int64 = 30
    /// The most archive files one report reads.
    public static let maxArchives = 64
}

/// `switch`: turn a permission off for everyone, or back on (a privacy switch).
public struct SwitchOrder: Sendable, Hashable {
    public var permission: Permission
    public var off: Bool
    /// Also take away the access others gave the capture nodes (saved, put back on `on`).
    public var hard: Bool
    public var reason: String?
    /// `off` only (wire `expires`): when it turns itself back on, in milliseconds since 1970 UTC.
    public var expiresMilliseconds: Int64?
    /// `off` only (`--for`): it turns itself back on this many seconds after devaccessd
    /// records it, by devaccessd's clock. Excludes `expiresMilliseconds`.
    public var lastingSeconds: Int64?

    public init(permission: Permission, off: Bool, hard: Bool = false, reason: String? = nil,
                expiresMilliseconds: Int64? = nil, lastingSeconds: Int64? = nil) {
        self.lastingSeconds = lastingSeconds
        self.permission = permission
        self.off = off
        self.hard = hard
        self.reason = reason
        self.expiresMilliseconds = expiresMilliseconds
    }
}

/// The answer to every operation of this file: its result document.
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
    /// `DurationText`'s ten years.
    static let maxLastingSeconds: Int64 = DurationText.maximumSeconds

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
            if let seconds = order.lastingSeconds { members.append(JSONMember("for", .integer(seconds))) }
            add("reason", order.reason)
            add("program", order.program)
            add("accuracy", order.accuracy?.rawValue)
        case .revoke(let order):
            members.append(JSONMember("permission", .string(order.permission.rawValue)))
            add("user", order.user)
            add("device", order.device)
            add("reason", order.reason)
            add("program", order.program)
            if order.terminate { members.append(JSONMember("terminate", .bool(true))) }
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
        case .auditReport(let query):
            members.append(JSONMember("mode", .string(query.mode.rawValue)))
            if let since = query.sinceMilliseconds { members.append(JSONMember("since", .integer(since))) }
            if let until = query.untilMilliseconds { members.append(JSONMember("until", .integer(until))) }
            add("user", query.user)
            add("program", query.program)
            add("permission", query.permission?.rawValue)
            add("device", query.device)
            if !query.types.isEmpty { members.append(JSONMember("types", .array(query.types.map { .string($0) }))) }
            if query.after > 0 { members.append(JSONMember("after", .integer(query.after))) }
            if let limit = query.limit { members.append(JSONMember("limit", .integer(limit))) }
            if let event = query.event { members.append(JSONMember("event", .integer(event))) }
            members.append(JSONMember("verify", .bool(query.verify)))
            if query.timeline { members.append(JSONMember("timeline", .bool(true))) }
            if let wait = query.waitSeconds { members.append(JSONMember("wait", .integer(wait))) }
            if !query.archives.isEmpty {
                members.append(JSONMember("archives", .array(query.archives.map { .string($0) })))
            }
        case .setSwitch(let order):
            members.append(JSONMember("permission", .string(order.permission.rawValue)))
            members.append(JSONMember("state", .string(order.off ? "off" : "on")))
            if order.hard { members.append(JSONMember("hard", .bool(true))) }
            add("reason", order.reason)
            if let expires = order.expiresMilliseconds { members.append(JSONMember("expires", .integer(expires))) }
            if let seconds = order.lastingSeconds { members.append(JSONMember("for", .integer(seconds))) }
        case .reconcile, .switches:
            break
        default:
            break
        }
        return members
    }

    /// Reads the body of a request of `type` of this file; nil when `type` is not one of them.
    static func decode(_ type: String, _ reader: inout ObjectReader) throws(ProtocolError) -> Request? {
        switch type {
        case "decide":
            return .decide(try decisionOrder(&reader))
        case "revoke":
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            return .revoke(RevokeOrder(permission: permission, user: try name("user", &reader),
                                       device: try optionalName("device", &reader),
                                       reason: try reader.optionalString("reason", maxLength: maxReason),
                                       program: try optionalPath("program", &reader),
                                       terminate: try reader.optional("terminate").map { (value) throws(ProtocolError) in
                                           try Strict.bool(value, path: "$.terminate")
                                       } ?? false))
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
        case "switches":
            return .switches
        case "switch":
            return .setSwitch(try switchOrder(&reader))
        case "audit-verify":
            return .auditVerify(AuditVerifyQuery(archive: try optionalPath("archive", &reader)))
        case "audit-archive":
            let before = try reader.integer("before", in: 0...maxMilliseconds)
            return .auditArchive(AuditArchiveOrder(beforeMilliseconds: before, to: try optionalPath("to", &reader)))
        case "audit-report":
            return .auditReport(try auditReport(&reader))
        default:
            return nil
        }
    }

    private static func decisionOrder(_ reader: inout ObjectReader) throws(ProtocolError) -> DecisionOrder {
        let allow = try reader.word("decision", [("allow", true), ("deny", false)])
        let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
        let user = try name("user", &reader)
        let device = try optionalName("device", &reader)
        let expires = try reader.optionalInteger("expires", in: 1...maxMilliseconds)
        let lasting = try reader.optionalInteger("for", in: 1...maxLastingSeconds)
        if expires != nil, lasting != nil {
            throw ProtocolError(.badMessage, context: reader.childPath("for"), reason: "give 'expires' or 'for', not both")
        }
        let reason = try reader.optionalString("reason", maxLength: maxReason)
        let program = try optionalPath("program", &reader)
        let accuracy = try ConversationCoding.accuracy(&reader)
        if accuracy != nil && (!allow || permission != .location) {
            throw ProtocolError(.badMessage, context: reader.childPath("accuracy"),
                                reason: "'accuracy' goes only with decision 'allow' of permission location")
        }
        return DecisionOrder(allow: allow, permission: permission, user: user, device: device,
                             expiresMilliseconds: expires, lastingSeconds: lasting, reason: reason,
                             program: program, accuracy: accuracy)
    }

    private static func switchOrder(_ reader: inout ObjectReader) throws(ProtocolError) -> SwitchOrder {
        let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
        let off = try reader.word("state", [("off", true), ("on", false)])
        let hard = try reader.optional("hard").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: reader.childPath("hard"))
        } ?? false
        let reason = try reader.optionalString("reason", maxLength: maxReason)
        let expires = try reader.optionalInteger("expires", in: 1...maxMilliseconds)
        let lasting = try reader.optionalInteger("for", in: 1...maxLastingSeconds)
        if !off && (hard || expires != nil || lasting != nil) {
            throw ProtocolError(.badMessage, context: reader.childPath(hard ? "hard" : expires != nil ? "expires" : "for"),
                                reason: "'hard', 'expires' and 'for' go with state 'off' only")
        }
        if expires != nil, lasting != nil {
            throw ProtocolError(.badMessage, context: reader.childPath("for"), reason: "give 'expires' or 'for', not both")
        }
        return SwitchOrder(permission: permission, off: off, hard: hard, reason: reason,
                           expiresMilliseconds: expires, lastingSeconds: lasting)
    }

    private static func auditReport(_ reader: inout ObjectReader) throws(ProtocolError) -> AuditReportQuery {
        let mode = try reader.word("mode", AuditReportQuery.Mode.allCases.map { ($0.rawValue, $0) })
        let since = try reader.optionalInteger("since", in: 0...maxMilliseconds)
        let until = try reader.optionalInteger("until", in: 0...maxMilliseconds)
        let user = try optionalName("user", &reader)
        let program = try reader.optionalString("program", maxLength: maxPath)
        let permission = try reader.optional("permission").map { (value) throws(ProtocolError) in
            try Strict.permission(value, path: reader.childPath("permission"))
        }
        let device = try optionalName("device", &reader)
        let types = try reader.optionalArray("types", maxCount: 64) { (value, path) throws(ProtocolError) in
            try Strict.string(value, path: path, maxLength: 64)
        } ?? []
        let after = try reader.optionalInteger("after", in: 0...Int64.max) ?? 0
        let limit = try reader.optionalInteger("limit", in: 1...AuditReportQuery.maxLimit)
        let event = try reader.optionalInteger("event", in: 1...Int64.max)
        let verify = try reader.optional("verify").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: reader.childPath("verify"))
        } ?? true
        let timeline = try reader.optional("timeline").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: reader.childPath("timeline"))
        } ?? false
        let wait = try reader.optionalInteger("wait", in: 1...AuditReportQuery.maxWait)
        let archives = try reader.optionalArray("archives", maxCount: AuditReportQuery.maxArchives) {
            (value, path) throws(ProtocolError) -> String in
            let text = try Strict.string(value, path: path, maxLength: maxPath)
            guard text.hasPrefix("/"), !text.contains("\0") else {
                throw ProtocolError(.badMessage, context: path, reason: "an archive is not an absolute path")
            }
            return text
        } ?? []
        if mode == .event && event == nil {
            throw ProtocolError(.badMessage, context: reader.childPath("event"), reason: "mode 'event' needs 'event'")
        }
        return AuditReportQuery(mode: mode, sinceMilliseconds: since, untilMilliseconds: until, user: user,
                                program: program, permission: permission, device: device, types: types,
                                after: after, limit: limit, event: event, verify: verify, timeline: timeline,
                                waitSeconds: wait, archives: archives)
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
