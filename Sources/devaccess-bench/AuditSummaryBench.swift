import DevAccessCore
import DevAccessLedger
import Foundation

/// `audit --summary` over the benchmark's ledger: the ledger's counting alone, the whole
/// command (`devaccess audit --summary --offline`, which also walks the hash chain), and
/// `sqlite3` running the same GROUP BY queries on the same file.
enum AuditSummaryBench {
    /// What `Ledger.auditSummary` counts (in one pass of its own), as SQL GROUP BY queries, with no filter.
    static let sql = """
        SELECT permission, COALESCE(subject_uid, actor_uid) AS uid, COALESCE(subject_name, actor_name) AS name, type,
               CASE WHEN type IN ('decision', 'grant') THEN json_extract(details, '$.decision') END AS decision,
               CASE WHEN type IN ('decision', 'grant') THEN json_extract(details, '$.how') END AS how,
               count(*), min(seq), max(seq),
               sum(CASE WHEN type = 'run_end' THEN CAST(json_extract(details, '$.duration_usec') AS INTEGER) END)
        FROM audit_events WHERE 1 GROUP BY permission, uid, type, decision, how;
        SELECT program, count(*) AS n, min(seq), max(seq) FROM audit_events
        WHERE program IS NOT NULL AND 1 GROUP BY program ORDER BY n DESC, program LIMIT 10;
        """

    static func run(ledger: Ledger, events: Int, verifySeconds: Double, in work: String) {
        var summary = AuditSummary()
        let query = Measure.time {
            do {
                summary = try ledger.auditSummary(AuditFilter())
            } catch {
                fail("audit summary failed: \(error)")
            }
        }
        guard summary.total.events == Int64(events) else {
            fail("the summary counted \(summary.total.events) events of \(events)")
        }
        // In devaccessd a report walks from the head the previous walk verified (the verify above).
        var fromCheckpoint: Int64?
        let checkpointWalk = Measure.time {
            do {
                let (verification, from) = try ledger.verifyFromCheckpoint()
                guard verification.isIntact else { fail("the chain does not verify from the checkpoint") }
                fromCheckpoint = from
            } catch {
                fail("checkpoint walk failed: \(error)")
            }
        }
        var sqlite: Double?
        if FileManager.default.isExecutableFile(atPath: SQLiteTool.program) {
            var ok = false
            let seconds = Measure.time { ok = Shell.run(SQLiteTool.program, [work + "/ledger.db", sql]) }
            guard ok else { fail("sqlite3 could not run the GROUP BY queries on the ledger") }
            sqlite = seconds
        }
        let counting = "audit --summary: the counting over \(events) events"
        if let sqlite {
            report.add(counting, query * 1000, "ms", anchor: "sqlite3 shell: the same GROUP BY queries", sqlite * 1000,
                       goal: .ratioBelow(2, "within 2x sqlite3"))
        } else {
            report.skip(counting + " against sqlite3", SQLiteTool.missing)
        }
        report.add("report chain check from devaccessd's checkpoint (event \(fromCheckpoint ?? 0))", checkpointWalk * 1000,
                   "ms", anchor: "audit --verify, whole chain", verifySeconds * 1000,
                   note: "a report in the daemon = this + the counting")
        let devaccess = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("devaccess").path
        let commands = ["audit --summary --offline (process; chain from the checkpoint)",
                        "audit --summary --offline, no checkpoint kept (whole chain)",
                        "audit --format html --offline", "audit --format csv --offline"]
        guard getuid() == 0 else {
            for command in commands { report.skip(command, "needs root (the ledger is root's, --offline)") }
            return
        }
        guard FileManager.default.isExecutableFile(atPath: devaccess) else {
            for command in commands { report.skip(command, "no devaccess next to the bench (\(devaccess))") }
            return
        }
        let common = ["--offline", "--state-dir", work, "--socket", work + "/no-daemon.sock", "--output", "/dev/null"]
        var ok = false
        let command = Measure.time { ok = Shell.run(devaccess, ["audit", "--summary"] + common) }
        guard ok else { fail("devaccess audit --summary --offline failed") }
        report.add(commands[0], command * 1000, "ms", anchor: sqlite == nil ? nil : "sqlite3 GROUP BY (above)",
                   sqlite.map { $0 * 1000 }, goal: .below(1000, "< 1 s"))
        // The same with no checkpoint kept (a ledger no walk has verified yet): the whole chain.
        var cold = false
        let coldCommand = Measure.time {
            cold = Shell.run(SQLiteTool.program, [work + "/ledger.db", "DELETE FROM chain_checkpoint"])
                && Shell.run(devaccess, ["audit", "--summary"] + common)
        }
        if cold {
            report.add(commands[1], coldCommand * 1000, "ms", anchor: "audit --verify, whole chain", verifySeconds * 1000)
        } else {
            report.skip(commands[1], "failed (sqlite3 missing, or the command failed)")
        }
        for (format, goal) in [("html", BenchGoal.below(3000, "< 3 s")), ("csv", nil)] {
            var written = false
            let seconds = Measure.time {
                written = Shell.run(devaccess, ["audit", "--format", format] + common)
            }
            guard written else { fail("devaccess audit --format \(format) --offline failed") }
            report.add("audit --format \(format) --offline, \(events) events", seconds * 1000, "ms",
                       anchor: sqlite == nil ? nil : "sqlite3 GROUP BY (above)", sqlite.map { $0 * 1000 }, goal: goal)
        }
    }
}
