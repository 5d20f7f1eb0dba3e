import FoundationEssentials
import Glibc
import DevAccessCore

/// The audit trail: append (single or batched) and read back.
extension Ledger {
    /// Appends one event in its own durable transaction.
    @discardableResult
    public func append(_ event: AuditEvent) throws(LedgerError) -> RecordedAuditEvent {
        try write { _, audit throws(LedgerError) in try audit.append(event) }
    }

    /// Appends many events in one transaction (one fsync for all of them): all are
    /// chained and committed, or none. Returns the seq numbers given, nil for no events.
    @discardableResult
    public func append(contentsOf events: [AuditEvent]) throws(LedgerError) -> ClosedRange<Int64>? {
        guard !events.isEmpty else { return nil }
        return try write { _, audit throws(LedgerError) in
            for event in events { try audit.append(event) }
            return audit.firstSeq.map { $0...audit.lastSeq }
        }
    }

    /// Stored events with `seq > after`, oldest first, at most `limit`.
    public func events(after seq: Int64 = 0, limit: Int = Int.max) throws(LedgerError) -> [RecordedAuditEvent] {
        try read { db throws(LedgerError) in
            let columns = AuditWriter.insertColumns.joined(separator: ", ")
            let statement = try db.prepare("SELECT \(columns) FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?")
            try statement.bind([.integer(seq), .integer(Int64(clamping: limit))])
            var events: [RecordedAuditEvent] = []
            while try statement.step() { events.append(try AuditRow.read(statement, path: db.path)) }
            return events
        }
    }

    /// How many events are stored.
    public func eventCount() throws(LedgerError) -> Int64 {
        try read { db throws(LedgerError) in try db.integer("SELECT count(*) FROM audit_events") ?? 0 }
    }

    /// Walks the whole chain and reports the first event that is not as written.
    /// An intact walk is also the checkpoint later reports walk from (`verifyFromCheckpoint`),
    /// kept in the ledger.
    public func verify() throws(LedgerError) -> ChainVerification {
        let (verification, head, stored) = try read {
            db throws(LedgerError) -> (ChainVerification, (seq: Int64, hash: String)?, ChainCheckpoint?) in
            (try ChainVerifier.verify(db), try ChainVerifier.head(db), try ChainCheckpoint.stored(db))
        }
        if case .intact(let count) = verification, let head {
            remember(ChainCheckpoint(seq: head.seq, hash: head.hash, events: count), stored: stored)
        }
        return verification
    }
}

/// Decoding `audit_events` rows selected with `AuditWriter.insertColumns`.
enum AuditRow {
    static func read(_ row: borrowing SQLiteStatement, path: String) throws(LedgerError) -> RecordedAuditEvent {
        let seq = row.int64(0) ?? -1
        func bad(_ problem: String) -> LedgerError {
            .invalidRow(path: path, table: "audit_events", rowID: seq, problem: problem)
        }
        func principal(_ uidColumn: Int32, _ nameColumn: Int32) throws(LedgerError) -> Principal? {
            guard let raw = row.int64(uidColumn) else { return nil }
            guard let uid = UInt32(exactly: raw) else { throw bad("\(raw) is not a uid") }
            return Principal(uid: uid, name: row.text(nameColumn) ?? "")
        }
        guard let time = row.int64(1) else { throw bad("time_usec is NULL") }
        guard let type = row.text(2) else { throw bad("type is NULL") }
        let detailsJSON = row.text(12) ?? "{}"
        guard let details = DetailsJSON.decode(detailsJSON) else { throw bad("details is not a JSON object of strings") }
        let event = AuditEvent(
            type: AuditEventType(rawValue: type), time: Timestamp.date(time),
            actor: try principal(3, 4), subject: try principal(5, 6),
            permission: row.text(7).map(Permission.init(rawValue:)), deviceID: row.text(8), deviceName: row.text(9),
            program: row.text(10), nodePath: row.text(11), details: details)
        return RecordedAuditEvent(seq: seq, event: event, detailsJSON: detailsJSON,
                                  prevHash: row.text(13) ?? "", hash: row.text(14) ?? "")
    }

    /// The canonical form of the row as stored, bytes untouched, for verification.
    static func canonical(_ row: borrowing SQLiteStatement) -> CanonicalEvent {
        var values: [CanonicalEvent.Value?] = []
        for (index, name) in CanonicalEvent.fields.enumerated() {
            let column = Int32(index)
            if row.isNull(column) {
                values.append(nil)
            } else if CanonicalEvent.integerFields.contains(name) && row.isInteger(column) {
                values.append(.integer(row.int64(column) ?? 0))
            } else {
                // Text, or a non-integer where an integer belongs: encoded as stored, so
                // the hash no longer matches and verify reports the event as edited.
                values.append(.text(row.bytes(column) ?? []))
            }
        }
        return CanonicalEvent(values: values)
    }
}
