/// Walks `audit_events` in seq order, recomputing each hash, and names the first break.
///
/// A hash chain proves order and content relative to its newest hash; it cannot stop
/// someone with write access from rewriting the whole chain from some point on. The
/// journal copy (with DEVACCESS_HASH) is the outside anchor for that.
enum ChainVerifier {
    /// How far from its stored place verify looks for where a failing event's content
    /// was written (only on failure: one SHA-256 per candidate).
    static let probeWindow: Int64 = 10_000

    /// Where a walk starts and must end.
    struct Bounds {
        /// The first event's seq and the hash it must be chained to.
        var firstSeq: Int64
        var firstPrev: String
        /// What `firstPrev` is, for the report ("the genesis hash", ...).
        var startName: String
        var headSeq: Int64
        var headHash: String
        /// What records the head, for the report ("the chain head", ...).
        var headName: String
    }

    /// The ledger's chain: from the genesis hash, or from the newest `archived` event's
    /// record of the last event moved to an archive, to the chain head.
    static func verify(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> ChainVerification {
        let head = try db.prepare("SELECT seq, hash FROM chain_head WHERE id = 1")
        guard try head.step(), let headSeq = head.int64(0), let headHash = head.text(1) else {
            throw .invalidRow(path: db.path, table: "chain_head", rowID: 1, problem: "the chain head row is missing")
        }
        var bounds = Bounds(firstSeq: 1, firstPrev: Schema.genesisHash, startName: "the genesis hash",
                            headSeq: headSeq, headHash: headHash, headName: "the chain head")
        switch try ArchiveAnchor.newest(db) {
        case nil:
            break
        case .unreadable(let seq, let problem)?:
            return .broken(ChainBreak(seq: seq, kind: .edited, explanation: "it is an 'archived' event, but \(problem)"))
        case .anchor(let anchor)?:
            bounds.firstSeq = anchor.throughSeq + 1
            bounds.firstPrev = anchor.throughHash
            bounds.startName = "the hash of event \(anchor.throughSeq), the last one moved to an archive "
                + "(recorded by event \(anchor.eventSeq))"
        }
        return try walk(db, bounds)
    }

    /// Walks `audit_events` in seq order from `bounds.firstSeq` to `bounds.headSeq`.
    /// With `storedFrom`, rows before that seq are not read (a walk from a checkpoint: they
    /// were verified before).
    static func walk(_ db: borrowing SQLiteDatabase, _ bounds: Bounds,
                     storedFrom: Int64 = Int64.min) throws(LedgerError) -> ChainVerification {
        let hasher = try SHA256Hasher()
        let headSeq = bounds.headSeq
        let highestSeq = max(headSeq, try db.integer("SELECT max(seq) FROM audit_events") ?? 0)
        let rows = try db.prepare("SELECT \(AuditWriter.insertColumns.joined(separator: ", ")) FROM audit_events "
            + "WHERE seq >= \(storedFrom) ORDER BY seq")
        var expectedSeq = bounds.firstSeq
        var expectedPrev = bounds.firstPrev
        while try rows.step() {
            let seq = rows.int64(0) ?? 0
            if seq != expectedSeq {
                if seq < expectedSeq && expectedSeq == bounds.firstSeq {
                    return .broken(ChainBreak(seq: seq, kind: .inserted, explanation: """
                        it is stored, but the chain starts at event \(bounds.firstSeq), chained to \(bounds.startName)
                        """))
                }
                let missing = seq == expectedSeq + 1 ? "event \(expectedSeq) is" : "events \(expectedSeq)...\(seq - 1) are"
                return .broken(ChainBreak(seq: expectedSeq, kind: .removed,
                                          explanation: "\(missing) missing (the next stored event is \(seq))"))
            }
            let canonical = AuditRow.canonical(rows)
            let prevHash = rows.text(13) ?? ""
            let storedHash = rows.text(14) ?? ""
            guard prevHash.utf8.count == 64, let prevBytes = Hex.decode(prevHash.utf8) else {
                return .broken(ChainBreak(seq: seq, kind: .edited, explanation: "its prev_hash is not 64 hex digits"))
            }
            if try hasher.chainHash(previous: prevBytes, canonical: canonical.bytes) != storedHash {
                return .broken(try contentMismatch(db, hasher: hasher, seq: seq, canonical: canonical,
                                                   prevHash: prevHash, prevBytes: prevBytes, storedHash: storedHash,
                                                   highestSeq: highestSeq))
            }
            if prevHash != expectedPrev {
                if seq == bounds.firstSeq {
                    return .broken(ChainBreak(seq: seq, kind: .edited,
                                              explanation: "the first event is not chained to \(bounds.startName)"))
                }
                return .broken(try brokenLink(db, seq: seq, prevHash: prevHash))
            }
            expectedPrev = storedHash
            expectedSeq += 1
        }
        let last = expectedSeq - 1
        let count = expectedSeq - bounds.firstSeq
        if headSeq > last {
            let missing = headSeq == last + 1 ? "event \(headSeq) is" : "events \(last + 1)...\(headSeq) are"
            return .broken(ChainBreak(seq: last + 1, kind: .removed,
                                      explanation: "\(missing) missing from the end (\(bounds.headName) records \(headSeq))"))
        }
        if headSeq < last {
            return .broken(ChainBreak(seq: headSeq + 1, kind: .inserted,
                                      explanation: "events \(headSeq + 1)...\(last) were added after \(bounds.headName)"))
        }
        if bounds.headHash != expectedPrev {
            return .broken(ChainBreak(seq: last, kind: .edited,
                                      explanation: "the newest event's hash differs from the one recorded in \(bounds.headName)"))
        }
        return .intact(count: count)
    }

    /// The event does not hash to its stored value. If it does under another seq, its
    /// content was written there: moved (reordered) or shifted down after a deletion.
    private static func contentMismatch(_ db: borrowing SQLiteDatabase, hasher: borrowing SHA256Hasher, seq: Int64,
                                        canonical: CanonicalEvent, prevHash: String, prevBytes: [UInt8],
                                        storedHash: String, highestSeq: Int64) throws(LedgerError) -> ChainBreak {
        let lower = max(1, seq - probeWindow)
        let upper = max(lower, min(highestSeq, seq + probeWindow))
        for candidate in lower...upper where candidate != seq {
            guard try hasher.chainHash(previous: prevBytes, canonical: canonical.renumbered(candidate).bytes) == storedHash
            else { continue }
            // The autoclosure of `||` throws untyped, so look the predecessor up first.
            let predecessor = prevHash == Schema.genesisHash ? 0 : try seqOfEvent(db, hash: prevHash)
            if predecessor != nil {
                return ChainBreak(seq: seq, kind: .reordered,
                                  explanation: "it holds the content written as event \(candidate): events were reordered")
            }
            return ChainBreak(seq: seq, kind: .removed, explanation: """
                it holds the content written as event \(candidate), and the event that content was chained to \
                is gone: events were removed and later ones renumbered
                """)
        }
        return ChainBreak(seq: seq, kind: .edited,
                          explanation: "its stored fields no longer match its hash: it was changed after it was written")
    }

    /// The event is intact but does not follow the event before it.
    private static func brokenLink(_ db: borrowing SQLiteDatabase, seq: Int64, prevHash: String) throws(LedgerError)
        -> ChainBreak
    {
        if let other = try seqOfEvent(db, hash: prevHash), other != seq - 1 {
            return ChainBreak(seq: seq, kind: .reordered,
                              explanation: "it was chained after event \(other) but is stored after event \(seq - 1)")
        }
        if seq == 1 {
            return ChainBreak(seq: 1, kind: .edited, explanation: "the first event is not chained to the genesis hash")
        }
        return ChainBreak(seq: seq - 1, kind: .edited, explanation: """
            event \(seq) was chained to a different event \(seq - 1): event \(seq - 1) was replaced or rewritten \
            with a recomputed hash
            """)
    }

    private static func seqOfEvent(_ db: borrowing SQLiteDatabase, hash: String) throws(LedgerError) -> Int64? {
        let statement = try db.prepare("SELECT seq FROM audit_events WHERE hash = ? LIMIT 1")
        try statement.bind([.text(hash)])
        return try statement.step() ? statement.int64(0) : nil
    }
}
