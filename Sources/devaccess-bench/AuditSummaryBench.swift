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
                fatalError("audit summary failed: \(error)")
            }
        }
        guard summary.total.events == Int64(events) else {
            fatalError("the summary counted \(summary.total.events) events of \(events)")
        }
        print("audit --summary: counted over \(events) events in \(Measure.seconds(query)) "
              + "(the command adds the chain walk, \(Measure.seconds(verifySeconds)) above)")
        // In devaccessd a report walks from the head the previous walk verified (the verify above).
        var fromCheckpoint: Int64?
        let checkpointWalk = Measure.time {
            do {
                let (verification, from) = try ledger.verifyFromCheckpoint()
                guard verification.isIntact else { fatalError("the chain does not verify from the checkpoint") }
                fromCheckpoint = from
            } catch {
                fatalError("checkpoint walk failed: \(error)")
            }
        }
        print("report chain check from devaccessd's checkpoint (event \(fromCheckpoint ?? 0)): "
              + "\(Measure.seconds(checkpointWalk)); a report in the daemon = that + the counting")
        let devaccess = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("devaccess").path
        if getuid() == 0, FileManager.default.isExecutableFile(atPath: devaccess) {
            var ok = false
            let command = Measure.time {
                ok = Shell.run(devaccess, ["audit", "--summary", "--offline", "--state-dir", work,
                                           "--socket", work + "/no-daemon.sock", "--output", "/dev/null"])
            }
            print("devaccess audit --summary --offline (process, chain walk from the ledger's checkpoint, counting): "
                  + (ok ? Measure.seconds(command) : "failed"))
            // The same with no checkpoint kept (a ledger no walk has verified yet): the whole chain.
            var cold = false
            let coldCommand = Measure.time {
                cold = Shell.run(SQLiteTool.program, [work + "/ledger.db", "DELETE FROM chain_checkpoint"])
                    && Shell.run(devaccess, ["audit", "--summary", "--offline", "--state-dir", work,
                                             "--socket", work + "/no-daemon.sock", "--output", "/dev/null"])
            }
            print("devaccess audit --summary --offline with no checkpoint kept (walks the whole chain): "
                  + (cold ? Measure.seconds(coldCommand) : "failed"))
            for format in ["html", "csv"] {
                var written = false
                let report = Measure.time {
                    written = Shell.run(devaccess, ["audit", "--format", format, "--offline", "--state-dir", work,
                                                    "--socket", work + "/no-daemon.sock", "--output", "/dev/null"])
                }
                print("devaccess audit --format \(format) --offline over \(events) events: "
                      + (written ? Measure.seconds(report) : "failed"))
            }
        }
        guard FileManager.default.isExecutableFile(atPath: SQLiteTool.program) else { return }
        var ok = false
        let sqlite = Measure.time { ok = Shell.run(SQLiteTool.program, [work + "/ledger.db", sql]) }
        guard ok else {
            print("sqlite3 CLI:    the GROUP BY failed")
            return
        }
        print("sqlite3 CLI:    the same GROUP BY queries in \(Measure.seconds(sqlite)); "
              + "ratio devaccess counting/sqlite3 = \(Measure.ratio(query / sqlite))")
    }
}
