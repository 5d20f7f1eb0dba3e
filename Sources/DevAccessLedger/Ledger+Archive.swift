import FoundationEssentials
import Glibc

/// What `archiveAudit` did.
public struct AuditArchiveOutcome: Sendable, Hashable {
    /// Events older than this were to move.
    public var before: Date
    /// The record written in the ledger (the anchor); nil when no event was old enough.
    public var anchor: ArchiveAnchor?
    /// Whether the ledger was compacted afterwards (VACUUM); if not, its free pages are reused.
    public var vacuumed: Bool
    /// The ledger's size with its WAL, before and after.
    public var ledgerBytesBefore: Int64?
    public var ledgerBytesAfter: Int64?

    public init(before: Date, anchor: ArchiveAnchor?, vacuumed: Bool = false, ledgerBytesBefore: Int64? = nil,
                ledgerBytesAfter: Int64? = nil) {
        self.before = before
        self.anchor = anchor
        self.vacuumed = vacuumed
        self.ledgerBytesBefore = ledgerBytesBefore
        self.ledgerBytesAfter = ledgerBytesAfter
    }
}

/// How an archive file relates to the ledger.
public enum ArchiveLink: Sendable, Hashable {
    /// An `archived` event in the ledger records exactly this archive's range and hashes.
    case anchored(eventSeq: Int64)
    /// An `archived` event records this range differently: one of the two was changed.
    case mismatch(eventSeq: Int64, explanation: String)
    /// No `archived` event in the ledger records this range.
    case unrecorded(String)
}

/// The outcome of `Ledger.verifyArchive(at:)`.
public struct ArchiveVerification: Sendable, Hashable {
    public var path: String
    /// The archive's own chain, from its recorded start to its recorded end.
    public var chain: ChainVerification
    public var firstSeq: Int64
    public var throughSeq: Int64
    public var throughHash: String
    public var link: ArchiveLink

    /// The chain is intact and the ledger's record of it agrees.
    public var isIntact: Bool {
        guard chain.isIntact, case .anchored = link else { return false }
        return true
    }
}

/// Retention: old events move to an archive file, and the chain stays checkable across
/// the files (`ArchiveAnchor`).
extension Ledger {
    /// The first and last seq to move and the hashes at both ends.
    struct ArchiveRange: Sendable {
        var firstSeq: Int64
        var throughSeq: Int64
        var firstPrevHash: String
        var throughHash: String
        var events: Int64 { throughSeq - firstSeq + 1 }
    }

    /// Moves the events older than `before` to a new archive file at `target` (default: a
    /// new `audit-archive-...db` beside the ledger) and records the move as an `archived`
    /// event in the ledger. What moves is the oldest run of events whose times are all
    /// before `before`, so the chain stays one contiguous run per file.
    ///
    /// Order: the chain is verified first (moving events out of a broken chain would
    /// split the evidence); the archive is written and made durable; then, in one ledger
    /// transaction, the events are deleted and the `archived` event appended. A failure
    /// before that commit removes the archive, so the events are in exactly one place; a
    /// crash between the two leaves them in both, and the archive file unrecorded.
    ///
    /// Afterwards the ledger is compacted (VACUUM) when a quarter of it or more is free, and
    /// its WAL truncated, so the space the events took is given back.
    public func archiveAudit(before: Date, to target: String?, by actor: Principal,
                             now: Date = Date()) throws(LedgerError) -> AuditArchiveOutcome {
        guard mode == .readWrite else { throw .readOnly(path: path, nil) }
        let beforeUsec = try Timestamp.microseconds(before)
        if case .broken(let chainBreak) = try verify() {
            throw .archive(path: target ?? StateFiles.split(path).directory, reason: "nothing was archived: the ledger's "
                + "audit chain is broken (\(chainBreak)), and moving events would split the evidence; keep the ledger "
                + "as it is and run 'devaccess audit --verify'")
        }
        guard let range = try read({ db throws(LedgerError) in try Self.archivableRange(db, beforeUsec: beforeUsec) }) else {
            return AuditArchiveOutcome(before: before, anchor: nil)
        }
        let archivePath = target ?? StateFiles.split(path).directory + "/"
            + ArchiveFile.defaultName(firstSeq: range.firstSeq, throughSeq: range.throughSeq, at: now)
        let bytesBefore = StateFiles.bytes(of: path)
        try ArchiveFile.create(archivePath)
        do {
            try copy(range, to: archivePath, beforeUsec: beforeUsec, archivedUsec: try Timestamp.microseconds(now))
            try ArchiveFile.syncDirectory(of: archivePath)
            let ledgerPath = path
            let anchor = try write { db, audit throws(LedgerError) in
                // The one writer archives, but refusals append beside it: check the range is as copied.
                guard try Self.archivableRange(db, beforeUsec: beforeUsec).map({
                    $0.firstSeq == range.firstSeq && $0.throughSeq >= range.throughSeq
                }) == true, try Self.hash(db, seq: range.throughSeq) == range.throughHash else {
                    throw LedgerError.archive(path: archivePath, reason: "the ledger's oldest events changed while they "
                        + "were being copied; nothing was archived")
                }
                let delete = try db.prepare("DELETE FROM audit_events WHERE seq BETWEEN ? AND ?")
                try delete.run([.integer(range.firstSeq), .integer(range.throughSeq)])
                let deleted = try db.integer("SELECT changes()") ?? 0
                guard deleted == range.events else {
                    throw LedgerError.invalidRow(path: ledgerPath, table: "audit_events", rowID: range.firstSeq,
                                                 problem: "\(deleted) events deleted, \(range.events) expected")
                }
                var anchor = ArchiveAnchor(eventSeq: 0, firstSeq: range.firstSeq, throughSeq: range.throughSeq,
                                           events: range.events, firstPrevHash: range.firstPrevHash,
                                           throughHash: range.throughHash, archivePath: archivePath)
                var details = anchor.details
                details[ArchiveAnchor.Key.before] = String(beforeUsec)
                let record = try audit.append(AuditEvent(type: .archived, time: now, actor: actor, details: details))
                anchor.eventSeq = record.seq
                return anchor
            }
            let vacuumed = compactIfWorthIt()
            try? withConnection { db throws(LedgerError) in try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
            return AuditArchiveOutcome(before: before, anchor: anchor, vacuumed: vacuumed,
                                       ledgerBytesBefore: bytesBefore, ledgerBytesAfter: StateFiles.bytes(of: path))
        } catch {
            ArchiveFile.discard(archivePath)
            throw error
        }
    }

    /// Gives the space back (an archive is often made because the disk filled up) when at
    /// least a quarter of the file is free: VACUUM rewrites what is left, so it costs about
    /// what the ledger still holds, and while it runs nothing else reaches the ledger; a
    /// small archive of a large ledger is not worth that, and its pages are reused by new
    /// events. A VACUUM that fails (no room for the copy) is not the archive's failure.
    private func compactIfWorthIt() -> Bool {
        let worthIt = (try? withConnection { db throws(LedgerError) -> Bool in
            let free = try db.integer("PRAGMA freelist_count") ?? 0
            let pages = try db.integer("PRAGMA page_count") ?? 0
            return pages > 0 && free * 4 >= pages
        }) ?? false
        guard worthIt else { return false }
        return (try? withConnection { db throws(LedgerError) in try db.execute("VACUUM") }) != nil
    }

    /// The oldest run of events stored before `beforeUsec`; nil when there is none.
    static func archivableRange(_ db: borrowing SQLiteDatabase, beforeUsec: Int64) throws(LedgerError) -> ArchiveRange? {
        guard let first = try db.integer("SELECT min(seq) FROM audit_events") else { return nil }
        let statement = try db.prepare("SELECT min(seq) FROM audit_events WHERE time_usec >= ?")
        try statement.bind([.integer(beforeUsec)])
        let firstKept = try statement.step() ? statement.int64(0) : nil
        let through: Int64
        if let firstKept {
            through = firstKept - 1
        } else {
            through = try db.integer("SELECT max(seq) FROM audit_events") ?? 0
        }
        guard through >= first else { return nil }
        let prev = try db.prepare("SELECT prev_hash FROM audit_events WHERE seq = ?")
        try prev.bind([.integer(first)])
        guard try prev.step(), let firstPrev = prev.text(0), let throughHash = try hash(db, seq: through) else {
            throw .invalidRow(path: db.path, table: "audit_events", rowID: first, problem: "the range to archive is incomplete")
        }
        return ArchiveRange(firstSeq: first, throughSeq: through, firstPrevHash: firstPrev, throughHash: throughHash)
    }

    private static func hash(_ db: borrowing SQLiteDatabase, seq: Int64) throws(LedgerError) -> String? {
        let statement = try db.prepare("SELECT hash FROM audit_events WHERE seq = ?")
        try statement.bind([.integer(seq)])
        return try statement.step() ? statement.text(0) : nil
    }

    /// Copies the range into the new file, attached to this connection, in one
    /// transaction of that file only (the ledger is only read), synchronous FULL.
    private func copy(_ range: ArchiveRange, to archivePath: String, beforeUsec: Int64,
                      archivedUsec: Int64) throws(LedgerError) {
        let ledgerPath = path
        try withConnection { db throws(LedgerError) in
            try db.prepare("ATTACH DATABASE ? AS archive").run([.text(archivePath)])
            do throws(LedgerError) {
                try db.execute("PRAGMA archive.journal_mode = DELETE; PRAGMA archive.synchronous = FULL")
                try db.transaction(immediate: false) { db throws(LedgerError) in
                    let events = try db.text(
                        "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = 'audit_events'") ?? ""
                    try db.execute(try ArchiveFile.schema(ledgerEvents: events, archivePath: archivePath))
                    let columns = AuditWriter.insertColumns.joined(separator: ", ")
                    try db.prepare("""
                        INSERT INTO archive.audit_events (\(columns))
                        SELECT \(columns) FROM main.audit_events WHERE seq BETWEEN ? AND ? ORDER BY seq
                        """).run([.integer(range.firstSeq), .integer(range.throughSeq)])
                    try db.prepare("""
                        INSERT INTO archive.archive_info (id, first_seq, through_seq, events, first_prev_hash,
                            through_hash, before_usec, archived_usec, ledger_path)
                        VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)
                        """).run([.integer(range.firstSeq), .integer(range.throughSeq), .integer(range.events),
                                  .text(range.firstPrevHash), .text(range.throughHash), .integer(beforeUsec),
                                  .integer(archivedUsec), .text(ledgerPath)])
                    let copied = try db.integer("SELECT count(*) FROM archive.audit_events") ?? 0
                    guard copied == range.events else {
                        throw LedgerError.archive(path: archivePath, reason: "\(copied) events copied, \(range.events) "
                            + "expected (the ledger has a gap: run 'devaccess audit --verify')")
                    }
                }
            } catch {
                try? db.execute("DETACH DATABASE archive")
                throw error
            }
            try db.execute("DETACH DATABASE archive")
        }
    }

    /// Verifies an archive file: its own chain from its recorded start to its recorded end,
    /// and that an `archived` event in this ledger records the same range and hashes.
    public func verifyArchive(at archivePath: String) throws(LedgerError) -> ArchiveVerification {
        let archive: SQLiteDatabase
        do {
            archive = try SQLiteDatabase.open(path: archivePath, readOnly: true)
        } catch {
            throw .archive(path: archivePath, reason: "cannot be opened: \(error)")
        }
        let info = try archive.transaction(immediate: false) { db throws(LedgerError) -> ArchiveInfo in
            let info = try ArchiveInfo.read(db)
            return ArchiveInfo(firstSeq: info.firstSeq, throughSeq: info.throughSeq, events: info.events,
                               firstPrevHash: info.firstPrevHash, throughHash: info.throughHash,
                               chain: try ChainVerifier.walk(db, ChainVerifier.Bounds(
                                   firstSeq: info.firstSeq, firstPrev: info.firstPrevHash,
                                   startName: "the hash the archive records for its start", headSeq: info.throughSeq,
                                   headHash: info.throughHash, headName: "the archive's record of its end")))
        }
        let records = try read { db throws(LedgerError) in try ArchiveAnchor.all(db) }
        return ArchiveVerification(path: archivePath, chain: info.chain ?? .intact(count: 0), firstSeq: info.firstSeq,
                                   throughSeq: info.throughSeq, throughHash: info.throughHash,
                                   link: Self.link(info, records: records))
    }

    /// Default archive files are named `audit-archive-<UTC time>-<first>-<last>.db`.
    public static var archiveNamePrefix: String { ArchiveFile.namePrefix }

    /// The directory holding the ledger (and, by default, its archives).
    public var directory: String { StateFiles.split(path).directory }

    /// Every readable archive record still in the ledger, newest first.
    public func archiveRecords() throws(LedgerError) -> [ArchiveAnchor] {
        try read { db throws(LedgerError) in
            try ArchiveAnchor.all(db).compactMap { found in
                if case .anchor(let anchor) = found { return anchor }
                return nil
            }
        }
    }

    /// The ledger's newest archive record, nil when nothing was ever archived (or it is unreadable).
    public func archiveAnchor() throws(LedgerError) -> ArchiveAnchor? {
        try read { db throws(LedgerError) in
            if case .anchor(let anchor)? = try ArchiveAnchor.newest(db) { return anchor }
            return nil
        }
    }

    private static func link(_ info: ArchiveInfo, records: [ArchiveAnchor.Found]) -> ArchiveLink {
        for found in records {
            guard case .anchor(let anchor) = found,
                  anchor.firstSeq == info.firstSeq || anchor.throughSeq == info.throughSeq else { continue }
            var differences: [String] = []
            if anchor.firstSeq != info.firstSeq || anchor.throughSeq != info.throughSeq || anchor.events != info.events {
                differences.append("the ledger records events \(anchor.firstSeq)...\(anchor.throughSeq) "
                    + "(\(anchor.events)), the archive holds \(info.firstSeq)...\(info.throughSeq) (\(info.events))")
            }
            if anchor.firstPrevHash != info.firstPrevHash {
                differences.append("the hash before its first event differs")
            }
            if anchor.throughHash != info.throughHash {
                differences.append("the hash of its last event differs (ledger \(anchor.throughHash), archive "
                    + "\(info.throughHash))")
            }
            if differences.isEmpty { return .anchored(eventSeq: anchor.eventSeq) }
            return .mismatch(eventSeq: anchor.eventSeq, explanation: "event \(anchor.eventSeq) of the ledger records "
                + "this archive differently: " + differences.joined(separator: "; "))
        }
        return .unrecorded("no 'archived' event in the ledger records events \(info.firstSeq)...\(info.throughSeq); "
            + "if a later archive run moved that record, it is in the next archive; a file whose record is gone "
            + "cannot be told from a forged one")
    }
}

/// The `archive_info` row of an archive file (and, once walked, its chain).
struct ArchiveInfo: Sendable {
    var firstSeq: Int64
    var throughSeq: Int64
    var events: Int64
    var firstPrevHash: String
    var throughHash: String
    var chain: ChainVerification?

    static func read(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> ArchiveInfo {
        let applicationID = try db.integer("PRAGMA application_id") ?? 0
        guard applicationID == Int64(ArchiveFile.applicationID) else {
            throw .archive(path: db.path, reason: "it is not a devaccess audit archive (application_id \(applicationID))")
        }
        let version = try db.integer("PRAGMA user_version") ?? 0
        guard version == Int64(ArchiveFile.version) else {
            throw .archive(path: db.path, reason: "archive format \(version) is not known to this devaccess")
        }
        let statement = try db.prepare(
            "SELECT first_seq, through_seq, events, first_prev_hash, through_hash FROM archive_info WHERE id = 1")
        guard try statement.step(), let first = statement.int64(0), let through = statement.int64(1),
              let events = statement.int64(2), let firstPrev = statement.text(3), let throughHash = statement.text(4) else {
            throw .archive(path: db.path, reason: "its archive_info row is missing or incomplete (changed by hand?)")
        }
        return ArchiveInfo(firstSeq: first, throughSeq: through, events: events, firstPrevHash: firstPrev,
                           throughHash: throughHash)
    }
}
