/// What an `archived` event records about one archive run: which events left the ledger
/// and the hashes at both ends, so the ledger's remaining chain can be checked from the
/// last moved event on, and the archive file against it.
///
/// The record is an audit event, not a table row: it is hashed into the chain like any
/// other event, so editing or deleting it breaks the chain, and the journal copy of it
/// anchors it outside the file. Only a later archive run can move it out of the ledger,
/// and that run writes a newer one; so the newest `archived` event in the ledger always
/// describes where the ledger's chain now starts.
public struct ArchiveAnchor: Sendable, Hashable {
    /// The seq of the `archived` event itself.
    public var eventSeq: Int64
    /// The first and last event moved, and how many.
    public var firstSeq: Int64
    public var throughSeq: Int64
    public var events: Int64
    /// The prev_hash of the first moved event and the hash of the last: the archive's ends.
    public var firstPrevHash: String
    public var throughHash: String
    /// Where the archive was written.
    public var archivePath: String

    /// Detail keys of an `archived` event (an interface: `audit` readers and verify use them).
    enum Key {
        static let firstSeq = "first_seq"
        static let throughSeq = "through_seq"
        static let events = "events"
        static let firstPrevHash = "first_prev_hash"
        static let throughHash = "through_hash"
        static let archive = "archive"
        static let before = "before"
    }

    var details: [String: String] {
        [Key.firstSeq: String(firstSeq), Key.throughSeq: String(throughSeq), Key.events: String(events),
         Key.firstPrevHash: firstPrevHash, Key.throughHash: throughHash, Key.archive: archivePath]
    }

    /// The record in an `archived` event's details; nil names what is wrong with them.
    static func parse(eventSeq: Int64, details: [String: String]) -> Result<ArchiveAnchor, Problem> {
        func number(_ key: String) -> Int64? { details[key].flatMap { Int64($0) } }
        func hash(_ key: String) -> String? {
            details[key].flatMap { $0.utf8.count == 64 && Hex.decode($0.utf8) != nil ? $0 : nil }
        }
        guard let first = number(Key.firstSeq), let through = number(Key.throughSeq), let events = number(Key.events),
              first >= 1, through >= first, events == through - first + 1, through < eventSeq,
              let firstPrev = hash(Key.firstPrevHash), let throughHash = hash(Key.throughHash),
              let archive = details[Key.archive] else {
            return .failure(Problem(text: "its details are not a complete archive record"))
        }
        return .success(ArchiveAnchor(eventSeq: eventSeq, firstSeq: first, throughSeq: through, events: events,
                                      firstPrevHash: firstPrev, throughHash: throughHash, archivePath: archive))
    }

    struct Problem: Error {
        var text: String
    }

    enum Found {
        case anchor(ArchiveAnchor)
        case unreadable(seq: Int64, problem: String)
    }

    /// The newest `archived` event in `db`, nil when events were never archived.
    static func newest(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> Found? {
        let statement = try db.prepare(
            "SELECT seq, details FROM audit_events WHERE type = '\(AuditEventType.archived.rawValue)' ORDER BY seq DESC LIMIT 1")
        guard try statement.step(), let seq = statement.int64(0) else { return nil }
        return found(seq: seq, detailsJSON: statement.text(1))
    }

    /// Every `archived` event still in `db`, newest first.
    static func all(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> [Found] {
        let statement = try db.prepare(
            "SELECT seq, details FROM audit_events WHERE type = '\(AuditEventType.archived.rawValue)' ORDER BY seq DESC")
        var list: [Found] = []
        while try statement.step() {
            guard let seq = statement.int64(0) else { continue }
            list.append(found(seq: seq, detailsJSON: statement.text(1)))
        }
        return list
    }

    private static func found(seq: Int64, detailsJSON: String?) -> Found {
        guard let text = detailsJSON, let details = DetailsJSON.decode(text) else {
            return .unreadable(seq: seq, problem: "its details are not a JSON object of strings")
        }
        switch parse(eventSeq: seq, details: details) {
        case .success(let anchor): return .anchor(anchor)
        case .failure(let problem): return .unreadable(seq: seq, problem: problem.text)
        }
    }
}
