import FoundationEssentials
import Glibc

/// A chain position an intact walk reached: the event's seq and hash, and how many events
/// the chain held up to it. Reports walk from here to the head instead of from the start,
/// so they check only what was written (or changed) since; an edit after the checkpoint,
/// a rewrite of the checkpoint event itself, or a removal of it (an archive, a deletion)
/// is still found, the last two by walking the whole chain again.
///
/// Kept in the ledger (`chain_checkpoint`, written after every intact walk of the ledger's
/// writer: `audit --verify` and reports, in devaccessd or offline), so a new process or a restarted
/// devaccessd starts from it too. What that trusts: someone able to write the ledger can
/// edit an event older than the checkpoint without reports noticing; `audit --verify`
/// never uses the checkpoint and finds it, and the journal copy anchors the hashes outside
/// the file. The row itself is not trusted further: its event is re-hashed before each use.
public struct ChainCheckpoint: Sendable, Hashable {
    public var seq: Int64
    public var hash: String
    public var events: Int64
}

extension Ledger {
    /// The chain's state, walked from the checkpoint when it still holds, else whole; an
    /// intact walk moves the checkpoint to the head. `from`: the checkpoint's seq when one
    /// was used (events up to it were verified by an earlier walk).
    public func verifyFromCheckpoint() throws(LedgerError) -> (verification: ChainVerification, from: Int64?) {
        let remembered = verifiedThrough.withLock { $0 }
        let (verification, from, head, stored) = try read {
            db throws(LedgerError) -> (ChainVerification, Int64?, (seq: Int64, hash: String)?, ChainCheckpoint?) in
            let head = try ChainVerifier.head(db)
            let stored = try ChainCheckpoint.stored(db)
            // The ledger's row first; this process's own when the row could not be written.
            for checkpoint in [stored, remembered].compactMap({ $0 }) {
                guard let head, try ChainVerifier.holds(db, checkpoint) else { continue }
                var result = try ChainVerifier.walk(db, ChainVerifier.Bounds(
                    firstSeq: checkpoint.seq + 1, firstPrev: checkpoint.hash,
                    startName: "the hash of event \(checkpoint.seq), verified intact earlier",
                    headSeq: head.seq, headHash: head.hash, headName: "the chain head"), storedFrom: checkpoint.seq + 1)
                if case .intact(let walked) = result { result = .intact(count: checkpoint.events + walked) }
                return (result, checkpoint.seq, head, stored)
            }
            return (try ChainVerifier.verify(db), nil, head, stored)
        }
        if case .intact(let count) = verification, let head {
            remember(ChainCheckpoint(seq: head.seq, hash: head.hash, events: count), stored: stored)
        }
        return (verification, from)
    }

    /// The checkpoint stored in the ledger, if any.
    public func storedCheckpoint() throws(LedgerError) -> ChainCheckpoint? {
        try read { db throws(LedgerError) in try ChainCheckpoint.stored(db) }
    }

    /// A ledger opened read-only by the one writer (an offline report, under the engine
    /// lock): intact walks store their checkpoint in the file, as devaccessd's do.
    public func writesCheckpoints() {
        storesCheckpoints.store(true, ordering: .relaxed)
    }

    /// Keeps `checkpoint` in memory and, unless it is already there, in the ledger. Writing
    /// it is best effort: a ledger that cannot be written (immutable, read-only mount) is
    /// still reported on, only walked whole again by the next process.
    func remember(_ checkpoint: ChainCheckpoint, stored: ChainCheckpoint?) {
        verifiedThrough.withLock { $0 = checkpoint }
        guard stored != checkpoint, storesCheckpoints.load(ordering: .relaxed) else { return }
        let save = { (db: borrowing SQLiteDatabase) throws(LedgerError) in
            try db.transaction(immediate: true) { db throws(LedgerError) in
                try db.prepare("""
                    INSERT OR REPLACE INTO chain_checkpoint (id, seq, hash, events, verified_usec) VALUES (1, ?, ?, ?, ?)
                    """).run([.integer(checkpoint.seq), .text(checkpoint.hash), .integer(checkpoint.events),
                              .integer((try? Timestamp.microseconds(Date())) ?? 0)])
            }
        }
        do {
            if mode == .readWrite {
                try withConnection(save)
            } else {
                // Opened for reading (offline reports): a connection of its own for this one row.
                let writer = try SQLiteDatabase.open(path: path, readOnly: false)
                guard !writer.isReadOnly else { return }
                try writer.setBusyTimeout(milliseconds: 250)
                try save(writer)
            }
        } catch {
            // Not saved: the next process walks the whole chain; nothing is reported wrong.
        }
    }
}

extension ChainCheckpoint {
    static func stored(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> ChainCheckpoint? {
        let row = try db.prepare("SELECT seq, hash, events FROM chain_checkpoint WHERE id = 1")
        guard try row.step(), let seq = row.int64(0), let hash = row.text(1), let events = row.int64(2) else { return nil }
        return ChainCheckpoint(seq: seq, hash: hash, events: events)
    }
}

extension ChainVerifier {
    /// The chain head row (nil when there is none; verify reports that).
    static func head(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> (seq: Int64, hash: String)? {
        let head = try db.prepare("SELECT seq, hash FROM chain_head WHERE id = 1")
        guard try head.step(), let seq = head.int64(0), let hash = head.text(1) else { return nil }
        return (seq, hash)
    }

    /// The checkpoint event is still stored, with the hash that was verified, and its
    /// stored fields still hash to it.
    static func holds(_ db: borrowing SQLiteDatabase, _ checkpoint: ChainCheckpoint) throws(LedgerError) -> Bool {
        let statement = try db.prepare(
            "SELECT \(AuditWriter.insertColumns.joined(separator: ", ")) FROM audit_events WHERE seq = ?")
        try statement.bind([.integer(checkpoint.seq)])
        guard try statement.step(), statement.text(14) == checkpoint.hash,
              let prevHash = statement.text(13), let previous = Hex.decode(prevHash.utf8), previous.count == 32 else {
            return false
        }
        let canonical = AuditRow.canonical(statement)
        return try SHA256Hasher().chainHash(previous: previous, canonical: canonical.bytes) == checkpoint.hash
    }
}
