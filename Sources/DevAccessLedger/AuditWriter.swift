/// Appends events to the hash chain inside one write transaction: reads the chain head
/// once, numbers and hashes each event, and stores the new head at the end.
struct AuditWriter: ~Copyable {
    private let insert: SQLiteStatement
    private let updateHead: SQLiteStatement
    private let hasher: SHA256Hasher
    private let path: String
    private var headSeq: Int64
    private var headHash: String
    private var headHashBytes: [UInt8]
    private let keepRecords: Bool
    /// What was appended, kept only when the journal needs it (a 100,000-event batch
    /// should not hold every record in memory for nothing).
    private(set) var records: [RecordedAuditEvent] = []
    private(set) var firstSeq: Int64?

    static let insertColumns = CanonicalEvent.fields + ["prev_hash", "hash"]

    init(_ db: borrowing SQLiteDatabase, keepRecords: Bool) throws(LedgerError) {
        let head = try db.prepare("SELECT seq, hash FROM chain_head WHERE id = 1")
        guard try head.step(), let seq = head.int64(0), let hash = head.text(1) else {
            throw .invalidRow(path: db.path, table: "chain_head", rowID: 1, problem: "the chain head row is missing")
        }
        guard let bytes = Hex.decode(hash.utf8), bytes.count == 32 else {
            throw .invalidRow(path: db.path, table: "chain_head", rowID: 1, problem: "hash '\(hash)' is not 64 hex digits")
        }
        let placeholders = Array(repeating: "?", count: Self.insertColumns.count).joined(separator: ", ")
        let insert = try db.prepare(
            "INSERT INTO audit_events (\(Self.insertColumns.joined(separator: ", "))) VALUES (\(placeholders))")
        let updateHead = try db.prepare("UPDATE chain_head SET seq = ?, hash = ? WHERE id = 1")
        let hasher = try SHA256Hasher()
        // Stored only once nothing can throw: a noncopyable member cannot be half-initialised.
        self.insert = insert
        self.updateHead = updateHead
        self.hasher = hasher
        path = db.path
        headSeq = seq
        headHash = hash
        headHashBytes = bytes
        self.keepRecords = keepRecords
    }

    @discardableResult
    mutating func append(_ event: AuditEvent) throws(LedgerError) -> RecordedAuditEvent {
        let seq = headSeq + 1
        let timeUsec = try Timestamp.microseconds(event.time)
        var event = event
        event.details = StoredText.cappedDetails(event.details)
        let details = DetailsJSON.encode(event.details)
        let canonical = CanonicalEvent(seq: seq, timeUsec: timeUsec, event: event, detailsJSON: details)
        let digest = try hasher.digest(headHashBytes, canonical.bytes)
        let hash = Hex.encode(digest)
        try insert.run([
            .integer(seq), .integer(timeUsec), .text(event.type.rawValue),
            .uid(event.actor?.uid), .optional(event.actor?.name),
            .uid(event.subject?.uid), .optional(event.subject?.name),
            .optional(event.permission?.rawValue), .optional(event.deviceID), .optional(event.deviceName),
            .optional(event.program), .optional(event.nodePath), .text(details),
            .text(headHash), .text(hash),
        ])
        var stored = event
        stored.time = Timestamp.date(timeUsec)
        let record = RecordedAuditEvent(seq: seq, event: stored, detailsJSON: details, prevHash: headHash, hash: hash)
        if keepRecords { records.append(record) }
        if firstSeq == nil { firstSeq = seq }
        headSeq = seq
        headHash = hash
        headHashBytes = digest
        return record
    }

    var lastSeq: Int64 { headSeq }

    func finish() throws(LedgerError) {
        try updateHead.run([.integer(headSeq), .text(headHash)])
    }
}
