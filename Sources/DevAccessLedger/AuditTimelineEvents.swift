import DevAccessCore

/// One event as the HTML report's timeline needs it: who, what, where, when, and of the
/// details only the keys that open, close or place a bar or a mark. Reading these instead
/// of whole events (hashes, every details key in a dictionary) is most of what makes a
/// report over a million events take seconds rather than tens of them.
public struct AuditTimelineEvent: Sendable, Hashable {
    public var seq: Int64
    public var timeUsec: Int64
    public var type: String
    public var actor: Principal?
    public var subject: Principal?
    public var permission: String?
    public var deviceID: String?
    public var program: String?
    public var details: [String: String]

    /// The details keys the timeline reads, per event type.
    public static func detailKeys(of type: String) -> [String] {
        switch type {
        case AuditEventType.decision.rawValue, AuditEventType.grant.rawValue: ["decision", "how", "grant_id", "expires_usec"]
        case AuditEventType.revoke.rawValue, AuditEventType.expiry.rawValue: ["grant_id"]
        case AuditEventType.reset.rawValue: ["grant_ids"]
        case AuditEventType.runStart.rawValue: ["run_id", "permissions"]
        case AuditEventType.runEnd.rawValue: ["run_id", "permissions", "duration_usec"]
        default: []
        }
    }
}

extension Ledger {
    /// The events matching `filter` with `seq > after`, oldest first, at most `limit`, as the
    /// timeline reads them; with `archives`, theirs too.
    public func auditTimelineEvents(_ filter: AuditFilter, after seq: Int64 = 0, limit: Int = Int.max,
                                    archives: [String] = []) throws(LedgerError) -> [AuditTimelineEvent] {
        let (condition, values) = try filter.condition()
        return try AuditSources.merged(self, archives: archives, limit: limit, seq: \.seq) {
            db throws(LedgerError) -> [AuditTimelineEvent] in
            let statement = try db.prepare("""
                SELECT seq, time_usec, type, actor_uid, actor_name, subject_uid, subject_name, permission, device_id,
                       program, details
                FROM audit_events WHERE seq > ? AND \(condition) ORDER BY seq LIMIT ?
                """)
            try statement.bind([.integer(seq)] + values + [.integer(Int64(clamping: limit))])
            // A page repeats the same few names, types and programs: each String is made once.
            var columns = Array(repeating: ColumnInterner(), count: 10)
            func text(_ column: Int32) -> String? {
                let id = statement.withBytes(column) { columns[Int(column)].id($0) }
                return columns[Int(column)].value(id)
            }
            func principal(_ uid: Int32, _ name: Int32) -> Principal? {
                guard let raw = statement.int64(uid), let uid = UInt32(exactly: raw) else { return nil }
                return Principal(uid: uid, name: text(name) ?? "")
            }
            var events: [AuditTimelineEvent] = []
            while try statement.step() {
                let type = text(2) ?? ""
                var details: [String: String] = [:]
                for key in AuditTimelineEvent.detailKeys(of: type) {
                    details[key] = statement.withBytes(10) { DetailsScan.value(key, in: $0) }
                }
                events.append(AuditTimelineEvent(
                    seq: statement.int64(0) ?? 0, timeUsec: statement.int64(1) ?? 0, type: type,
                    actor: principal(3, 4), subject: principal(5, 6), permission: text(7), deviceID: text(8),
                    program: text(9), details: details))
            }
            return events
        }
    }
}
