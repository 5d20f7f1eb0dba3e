import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation
import Glibc

/// `ledger`: audit events appended in durable batches, read back and verified, against the
/// sqlite3 shell inserting and selecting the same rows on the same file system. `audit`:
/// the report paths over that ledger, then archiving it. Both use one ledger, made once.
final class LedgerBench {
    let work: String
    let ledger: Ledger
    let events: Int
    let template: [AuditEvent]
    /// What `fill` measured, once the events are written.
    private var filled: (readCount: Int, verifySeconds: Double)?

    init(events: Int, batch: Int, in work: String) {
        self.work = work
        self.events = events
        do {
            ledger = try Ledger(path: work + "/ledger.db", journal: .disabled)
        } catch {
            fail("cannot create a ledger in \(work): \(error)")
        }
        template = (0..<max(1, min(batch, events))).map { BenchEvents.event($0) }
    }

    /// Appends the events, reads them back and verifies the chain; with `rows`, the figures
    /// (the audit section alone still needs the events written).
    func fill(rows: Bool) -> (readCount: Int, verifySeconds: Double) {
        let batch = template.count
        let appendTime = Measure.time {
            var written = 0
            while written < events {
                let count = min(batch, events - written)
                do {
                    try ledger.append(contentsOf: count == batch ? template : Array(template.prefix(count)))
                } catch {
                    fail("append failed: \(error)")
                }
                written += count
            }
        }
        var readCount = 0
        let readTime = Measure.time {
            do {
                readCount = try ledger.events().count
            } catch {
                fail("read back failed: \(error)")
            }
        }
        let verifyTime = Measure.time {
            do {
                guard try ledger.verify().isIntact else { fail("the chain the benchmark wrote does not verify") }
            } catch {
                fail("verify failed: \(error)")
            }
        }
        filled = (readCount, verifyTime)
        guard rows else { return (readCount, verifyTime) }
        let batches = (events + batch - 1) / batch
        let insert = SQLiteTool.insert(rows: events, in: work)
        let select = SQLiteTool.select(in: work)
        let append = "append \(events) events (\(batches) durable batch(es) of \(batch))"
        let sqliteInsert = "sqlite3 shell: INSERT of the same rows"
        if let insert {
            report.add(append, appendTime * 1000, "ms", anchor: sqliteInsert, insert * 1000,
                       note: "\(Measure.rate(Double(events) / appendTime)) events/s; sqlite3 in one transaction, "
                           + "WAL, synchronous=FULL like the ledger")
        } else {
            report.add(append, appendTime * 1000, "ms", note: "no anchor: \(SQLiteTool.missing)")
        }
        let read = "read back \(readCount) events, decoded"
        if let select {
            report.add(read, readTime * 1000, "ms", anchor: "sqlite3 shell: SELECT * of the same rows", select * 1000,
                       note: "\(Measure.rate(Double(readCount) / readTime)) events/s")
        } else {
            report.add(read, readTime * 1000, "ms", note: "no anchor: \(SQLiteTool.missing)")
        }
        // The chain walk reads every event and hashes it: against the plain read above.
        report.add("audit --verify, \(readCount) events", verifyTime * 1000, "ms", anchor: "read back (above)",
                   readTime * 1000)
        return (readCount, verifyTime)
    }

    func audit(keepLedger: String?) {
        let (readCount, verifySeconds) = filled ?? fill(rows: false)
        AuditSummaryBench.run(ledger: ledger, events: readCount, verifySeconds: verifySeconds, in: work)
        if let keep = keepLedger {
            let kept = Shell.run(SQLiteTool.program, [work + "/ledger.db", ".backup '\(keep)'"])
            if !kept { report.skip("ledger kept at \(keep)", "the sqlite3 .backup failed") }
        }
        archive()
    }

    private func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    private func archive() {
        let sizeBefore = fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")
        var archived: AuditArchiveOutcome?
        let archiveTime = Measure.time {
            do {
                archived = try ledger.archiveAudit(before: Date(), to: work + "/archive.db",
                                                   by: Principal(uid: 0, name: "root"))
            } catch {
                fail("archive failed: \(error)")
            }
        }
        let sizeAfter = fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")
        let count = archived?.anchor?.events ?? 0
        report.add("audit --archive, \(count) events (verify, copy, delete, VACUUM)", archiveTime * 1000, "ms",
                   note: "ledger+WAL \(sizeBefore / 1024) KiB before, \(sizeAfter / 1024) KiB after (VACUUM "
                       + "\(archived?.vacuumed == true ? "done" : "failed")); archive "
                       + "\(fileSize(work + "/archive.db") / 1024) KiB")
        let archiveVerifyTime = Measure.time {
            do {
                guard try ledger.verifyArchive(at: work + "/archive.db").isIntact else { fail("the archive does not verify") }
            } catch {
                fail("archive verify failed: \(error)")
            }
        }
        report.add("audit --verify --archive-file, \(count) events", archiveVerifyTime * 1000, "ms")
        let refill = Measure.time {
            do {
                try ledger.append(contentsOf: template)
            } catch {
                fail("append after archive failed: \(error)")
            }
        }
        report.add("append \(template.count) events after the archive", refill * 1000, "ms",
                   note: "ledger+WAL then \((fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")) / 1024) KiB")
    }
}
