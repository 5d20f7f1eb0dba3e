/// A chain position this process has walked intact: the event's seq and hash, and how many
/// events the chain held up to it. Reports walk from here to the head instead of from the
/// start, so a long-running devaccessd checks only what was written (or changed) since;
/// an edit after the checkpoint, a rewrite of the checkpoint event itself, or a removal
/// of it (an archive, a deletion) is still found, the last by walking the whole chain again.
/// Kept in memory only: a file beside the ledger could be rewritten with it, and a restart
/// costs one full walk.
public struct ChainCheckpoint: Sendable, Hashable {
    public var seq: Int64
    public var hash: String
    public var events: Int64
}

extension Ledger {
    /// The chain's state, walked from the last checkpoint when it still holds, else whole;
    /// an intact walk moves the checkpoint to the head. `from`: the checkpoint's seq when one
    /// was used (events up to it were verified by an earlier walk of this process).
    public func verifyFromCheckpoint() throws(LedgerError) -> (verification: ChainVerification, from: Int64?) {
        let checkpoint = verifiedThrough.withLock { $0 }
        let (verification, from, head) = try read {
            db throws(LedgerError) -> (ChainVerification, Int64?, (seq: Int64, hash: String)?) in
            let head = try ChainVerifier.head(db)
            if let checkpoint, let head, try ChainVerifier.holds(db, checkpoint) {
                var result = try ChainVerifier.walk(db, ChainVerifier.Bounds(
                    firstSeq: checkpoint.seq + 1, firstPrev: checkpoint.hash,
                    startName: "the hash of event \(checkpoint.seq), verified intact earlier",
                    headSeq: head.seq, headHash: head.hash, headName: "the chain head"), storedFrom: checkpoint.seq + 1)
                if case .intact(let walked) = result { result = .intact(count: checkpoint.events + walked) }
                return (result, checkpoint.seq, head)
            }
            return (try ChainVerifier.verify(db), nil, head)
        }
        if case .intact(let count) = verification, let head {
            verifiedThrough.withLock { $0 = ChainCheckpoint(seq: head.seq, hash: head.hash, events: count) }
        }
        return (verification, from)
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
