import DevAccessCore
import DevAccessInterface

// The wire form of the operations that decide or record (their values: DevAccessInterface,
// Values/Administration.swift).
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
