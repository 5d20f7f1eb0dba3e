import FoundationEssentials
import Glibc
import DevAccessCore

/// Which audit events a report covers. Every criterion given must hold (they compose);
/// nil or empty means "any".
public struct AuditFilter: Sendable, Hashable {
    /// Events at or after this time.
    public var since: Date?
    /// Events before this time.
    public var until: Date?
    /// Events about this uid or caused by it (subject or actor).
    public var uid: UInt32?
    /// The program's full path, or its last path component.
    public var program: String?
    public var permission: String?
    /// A device's stable id or its name as recorded.
    public var device: String?
    /// Event types (`request`, `decision`, ...).
    public var types: [String]

    public init(since: Date? = nil, until: Date? = nil, uid: UInt32? = nil, program: String? = nil,
                permission: String? = nil, device: String? = nil, types: [String] = []) {
        self.since = since
        self.until = until
        self.uid = uid
        self.program = program
        self.permission = permission
        self.device = device
        self.types = types
    }

    /// The SQL condition (always something, `1` for no criterion) and its bound values.
    func condition() throws(LedgerError) -> (String, [SQLValue]) {
        var parts: [String] = []
        var values: [SQLValue] = []
        if let since {
            parts.append("time_usec >= ?")
            values.append(.integer(try Timestamp.microseconds(since)))
        }
        if let until {
            parts.append("time_usec < ?")
            values.append(.integer(try Timestamp.microseconds(until)))
        }
        if let uid {
            parts.append("(subject_uid = ? OR actor_uid = ?)")
            values += [.uid(uid), .uid(uid)]
        }
        if let program {
            // A bare name matches the last component of the recorded path.
            parts.append("(program = ? OR program LIKE ? ESCAPE '\\')")
            values += [.text(program), .text("%/" + Self.likeEscaped(program))]
        }
        if let permission {
            // Runs of `devaccess run` name no permission of their own: their details list them.
            parts.append("""
                (permission = ? OR (permission IS NULL AND type IN ('run_start', 'run_end') \
                AND CASE WHEN json_valid(details) THEN instr(' ' || json_extract(details, '$.permissions') || ' ', ?) \
                ELSE 0 END > 0))
                """)
            values += [.text(permission), .text(" " + permission + " ")]
        }
        if let device {
            parts.append("(device_id = ? OR device_name = ?)")
            values += [.text(device), .text(device)]
        }
        if !types.isEmpty {
            parts.append("type IN (" + Array(repeating: "?", count: types.count).joined(separator: ", ") + ")")
            values += types.map { .text($0) }
        }
        return (parts.isEmpty ? "1" : parts.joined(separator: " AND "), values)
    }

    private static func likeEscaped(_ text: String) -> String {
        var out = ""
        for character in text {
            if character == "%" || character == "_" || character == "\\" { out.append("\\") }
            out.append(character)
        }
        return out
    }
}

extension AuditCounts {
    /// Adds `count` events of one kind (`decision` is the stored allow/deny, `how` the method).
    /// A request writes a `request` event per stage (received, prompt, answered) and
    /// permission: it counts once per permission, by its `received` event (an event of a
    /// ledger from before stages, with none, counts too).
    mutating func add(type: String, decision: String?, how: String?, stage: String? = nil, count: Int64, first: Int64,
                      last: Int64, runMicroseconds: Int64 = 0) {
        events += count
        runSeconds += runMicroseconds / 1_000_000
        switch type {
        case AuditEventType.request.rawValue: if stage == nil || stage == "received" { requests += count }
        case AuditEventType.decision.rawValue, AuditEventType.grant.rawValue:
            if decision == "deny" {
                denials += count
            } else {
                switch how {
                case "consent": grantsConsent += count
                case "auth_self": grantsPassword += count
                case "policy": grantsPolicy += count
                default: grantsAdmin += count
                }
            }
        case AuditEventType.revoke.rawValue: revocations += count
        case AuditEventType.expiry.rawValue: expiries += count
        case AuditEventType.reset.rawValue: resets += count
        case AuditEventType.refused.rawValue: refusals += count
        case AuditEventType.approvalQueued.rawValue: queued += count
        case AuditEventType.driftSeen.rawValue: driftFound += count
        case AuditEventType.driftRepaired.rawValue: driftRepaired += count
        case AuditEventType.hotplug.rawValue: hotplug += count
        case AuditEventType.runStart.rawValue: runs += count
        default: break
        }
        firstEvent = min(firstEvent ?? first, first)
        lastEvent = max(lastEvent ?? last, last)
    }
}

extension Ledger {
    /// The events matching `filter` with `seq > after`, oldest first, at most `limit`; with
    /// `archives` (archive files of `audit --archive`), theirs too, in seq order with the ledger's.
    public func auditEvents(_ filter: AuditFilter, after seq: Int64 = 0, limit: Int = Int.max,
                            archives: [String] = []) throws(LedgerError) -> [RecordedAuditEvent] {
        let (condition, values) = try filter.condition()
        return try AuditSources.merged(self, archives: archives, limit: limit, seq: \.seq) {
            db throws(LedgerError) -> [RecordedAuditEvent] in
            let columns = AuditWriter.insertColumns.joined(separator: ", ")
            let statement = try db.prepare(
                "SELECT \(columns) FROM audit_events WHERE seq > ? AND \(condition) ORDER BY seq LIMIT ?")
            try statement.bind([.integer(seq)] + values + [.integer(Int64(clamping: limit))])
            var events: [RecordedAuditEvent] = []
            while try statement.step() { events.append(try AuditRow.read(statement, path: db.path)) }
            return events
        }
    }

    /// The newest stored event's seq (0 when none is stored).
    public func newestEventSeq() throws(LedgerError) -> Int64 {
        try read { db throws(LedgerError) in try db.integer("SELECT max(seq) FROM audit_events") ?? 0 }
    }

    /// Per permission, per user and per program counts of the events matching `filter`
    /// (and those of `archives`): one pass over them (AuditSummaryScan).
    public func auditSummary(_ filter: AuditFilter, archives: [String] = []) throws(LedgerError) -> AuditSummary {
        let (condition, values) = try filter.condition()
        var scan = AuditSummaryScan()
        func count(_ db: borrowing SQLiteDatabase) throws(LedgerError) {
            let statement = try db.prepare("SELECT \(AuditSummaryScan.columns) FROM audit_events WHERE \(condition)")
            try statement.bind(values)
            while try statement.step() { scan.add(statement) }
        }
        for archive in archives { try AuditSources.reading(archive) { db throws(LedgerError) in try count(db) } }
        try read { db throws(LedgerError) in try count(db) }
        return scan.summary()
    }

    /// One event and its place in the chain; nil when no event `seq` is stored in the ledger
    /// or in one of `archives`.
    public func auditEvent(seq: Int64, archives: [String] = []) throws(LedgerError)
        -> (RecordedAuditEvent, AuditChainPosition)?
    {
        if let found = try read({ db throws(LedgerError) in
            try Self.auditEvent(db, seq: seq, head: try db.integer("SELECT seq FROM chain_head WHERE id = 1"))
        }) {
            return found
        }
        for archive in archives {
            let found = try AuditSources.reading(archive) { db throws(LedgerError) in
                try Self.auditEvent(db, seq: seq, head: try db.integer("SELECT through_seq FROM archive_info WHERE id = 1"))
            }
            if let found { return found }
        }
        return nil
    }

    /// `head`: the newest event the file records (the ledger's chain head, an archive's last event).
    private static func auditEvent(_ db: borrowing SQLiteDatabase, seq: Int64, head: Int64?) throws(LedgerError)
        -> (RecordedAuditEvent, AuditChainPosition)?
    {
        let columns = AuditWriter.insertColumns.joined(separator: ", ")
        let statement = try db.prepare("SELECT \(columns) FROM audit_events WHERE seq = ?")
        try statement.bind([.integer(seq)])
        guard try statement.step() else { return nil }
        let record = try AuditRow.read(statement, path: db.path)
        let canonical = AuditRow.canonical(statement)
        let hasher = try SHA256Hasher()
        var matches = false
        if let previous = Hex.decode(record.prevHash.utf8), previous.count == 32 {
            matches = try hasher.chainHash(previous: previous, canonical: canonical.bytes) == record.hash
        }
        let before = try Self.text(db, "SELECT hash FROM audit_events WHERE seq = ?", seq - 1)
        let after = try Self.text(db, "SELECT prev_hash FROM audit_events WHERE seq = ?", seq + 1)
        let position = AuditChainPosition(
            seq: seq, prevHash: record.prevHash, hash: record.hash, hashMatches: matches,
            linksToPrevious: before.map { $0 == record.prevHash }, linkedFromNext: after.map { $0 == record.hash },
            firstStored: try db.integer("SELECT min(seq) FROM audit_events") ?? seq,
            head: head ?? seq)
        return (record, position)
    }

    /// The text of the first row of a query with one integer parameter.
    private static func text(_ db: borrowing SQLiteDatabase, _ sql: String, _ value: Int64) throws(LedgerError) -> String? {
        let lookup = try db.prepare(sql)
        try lookup.bind([.integer(value)])
        return try lookup.step() ? lookup.text(0) : nil
    }
}

/// Reports over the ledger and the archive files given: each archive is opened read-only,
/// checked to be an archive, and read with the same queries as the ledger.
enum AuditSources {
    static func reading<R>(_ path: String, _ body: (borrowing SQLiteDatabase) throws(LedgerError) -> R)
        throws(LedgerError) -> R
    {
        let archive: SQLiteDatabase
        do {
            archive = try SQLiteDatabase.open(path: path, readOnly: true)
        } catch {
            throw .archive(path: path, reason: "cannot be opened: \(error)")
        }
        return try archive.transaction(immediate: false) { db throws(LedgerError) -> R in
            _ = try ArchiveInfo.read(db)
            return try body(db)
        }
    }

    /// `query` over every archive and the ledger, merged in seq order, at most `limit`.
    static func merged<Item: Sendable>(_ ledger: Ledger, archives: [String], limit: Int, seq: (Item) -> Int64,
                                       _ query: (borrowing SQLiteDatabase) throws(LedgerError) -> [Item])
        throws(LedgerError) -> [Item]
    {
        var found: [Item] = []
        for archive in archives { found += try reading(archive, query) }
        found += try ledger.read(query)
        guard !archives.isEmpty else { return found }
        found.sort { seq($0) < seq($1) }
        return Array(found.prefix(limit))
    }
}
