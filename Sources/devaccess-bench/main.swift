import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation
import Glibc

// devaccess-bench: measures the ledger and the enforcement engine against the standard
// tools, in the same run, on the same disk. Run by hand, as root, in a release build:
//   swift build -c release && sudo .build/release/devaccess-bench [--events N] [--batch N] [--devices N] [--rounds N]
//   [--launches N] [--dir DIR] [--keep-ledger FILE]
// Never a timed test: the figures depend on the machine.

let arguments = BenchArguments.parse(Array(CommandLine.arguments.dropFirst()))
let work = Scratch.make(in: arguments.directory)
defer { Scratch.remove(work) }

print("devaccess-bench: scratch \(work) (\(Scratch.fileSystem(work))); \(ProcessInfo.processInfo.activeProcessorCount) CPUs")
#if DEBUG
print("note: this is a debug build; use 'swift build -c release' for representative figures")
#endif

// MARK: - Audit events

let events = arguments.events
let ledger: Ledger
do {
    ledger = try Ledger(path: work + "/ledger.db", journal: .disabled)
} catch {
    fatalError("cannot create a ledger in \(work): \(error)")
}
let batch = max(1, min(arguments.batch, events))
let template = (0..<batch).map { BenchEvents.event($0) }
let appendTime = Measure.time {
    var written = 0
    while written < events {
        let count = min(batch, events - written)
        do {
            try ledger.append(contentsOf: count == batch ? template : Array(template.prefix(count)))
        } catch {
            fatalError("append failed: \(error)")
        }
        written += count
    }
}
let batches = (events + batch - 1) / batch
let appendRate = Double(events) / appendTime
print("ledger append:  \(events) events in \(batches) durable batch(es) of \(batch): "
      + "\(Measure.seconds(appendTime)) = \(Measure.rate(appendRate)) events/s")

let sqliteInsert = SQLiteTool.insert(rows: events, in: work)
if let sqliteInsert {
    print("sqlite3 CLI:    \(events) rows in 1 transaction (WAL, synchronous=FULL): "
          + "\(Measure.seconds(sqliteInsert)) = \(Measure.rate(Double(events) / sqliteInsert)) rows/s; "
          + "ratio devaccess/sqlite3 = \(Measure.ratio(appendRate / (Double(events) / sqliteInsert)))")
}

var readCount = 0
let readTime = Measure.time {
    do {
        readCount = try ledger.events().count
    } catch {
        fatalError("read back failed: \(error)")
    }
}
let readRate = Double(readCount) / readTime
print("ledger read:    \(readCount) events decoded in \(Measure.seconds(readTime)) = \(Measure.rate(readRate)) events/s")
if let sqliteRead = SQLiteTool.select(in: work) {
    print("sqlite3 CLI:    SELECT * of \(events) rows in \(Measure.seconds(sqliteRead)) = "
          + "\(Measure.rate(Double(events) / sqliteRead)) rows/s; "
          + "ratio devaccess/sqlite3 = \(Measure.ratio(readRate / (Double(events) / sqliteRead)))")
}
let verifyTime = Measure.time {
    do {
        guard try ledger.verify().isIntact else { fatalError("the chain the benchmark wrote does not verify") }
    } catch {
        fatalError("verify failed: \(error)")
    }
}
print("audit --verify: \(readCount) events in \(Measure.seconds(verifyTime)) = "
      + "\(Measure.rate(Double(readCount) / verifyTime)) events/s")

// MARK: - Audit summary

AuditSummaryBench.run(ledger: ledger, events: readCount, verifySeconds: verifyTime, in: work)
if let keep = arguments.keepLedger {
    print("ledger kept:    " + (Shell.run(SQLiteTool.program, [work + "/ledger.db", ".backup '\(keep)'"]) ? keep : "copy failed"))
}

// MARK: - Audit archive

func fileSize(_ path: String) -> Int64 {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : 0
}
let sizeBefore = fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")
var archived: AuditArchiveOutcome?
let archiveTime = Measure.time {
    do {
        archived = try ledger.archiveAudit(before: Date(), to: work + "/archive.db",
                                           by: Principal(uid: 0, name: "root"))
    } catch {
        fatalError("archive failed: \(error)")
    }
}
let sizeAfter = fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")
print("audit --archive: \(archived?.anchor?.events ?? 0) events in \(Measure.seconds(archiveTime)) (verify, copy, "
      + "delete); ledger+WAL \(sizeBefore / 1024) KiB before, \(sizeAfter / 1024) KiB after (VACUUM: "
      + "\(archived?.vacuumed == true ? "done" : "failed")); archive \(fileSize(work + "/archive.db") / 1024) KiB")
let archiveVerifyTime = Measure.time {
    do {
        guard try ledger.verifyArchive(at: work + "/archive.db").isIntact else { fatalError("the archive does not verify") }
    } catch {
        fatalError("archive verify failed: \(error)")
    }
}
print("audit --verify --archive-file: \(archived?.anchor?.events ?? 0) events in \(Measure.seconds(archiveVerifyTime))")
let refill = Measure.time {
    do {
        try ledger.append(contentsOf: template)
    } catch {
        fatalError("append after archive failed: \(error)")
    }
}
print("after archive:  \(template.count) more events in \(Measure.seconds(refill)); ledger+WAL "
      + "\((fileSize(work + "/ledger.db") + fileSize(work + "/ledger.db-wal")) / 1024) KiB")

// MARK: - Grant + ACL apply

guard getuid() == 0 else {
    print("grant+ACL:      skipped (needs root: mknod and ACL edits)")
    exit(0)
}
GrantBench.run(devices: arguments.devices, rounds: arguments.rounds, in: work)
LaunchBench.run(count: arguments.launches)
