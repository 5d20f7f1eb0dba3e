import FoundationEssentials
import Glibc
import DevAccessCore

/// Runs of `devaccess run`: begin (before the program's process exists, for its group id),
/// started (its process known), ended. Audited as `run_start` and `run_end`.
extension Ledger {
    /// Records a run being started and hands out its group id. Not audited yet: a run is
    /// audited when its program starts (`runStarted`) or when it ends without starting.
    public func beginRun(_ new: NewRun, at now: Date = Date()) throws(LedgerError) -> Run {
        guard !new.permissions.isEmpty else { throw .invalidArgument("a run needs at least one permission") }
        let time = try Timestamp.microseconds(now)
        return try write { db, _ throws(LedgerError) in
            try db.prepare("""
                INSERT INTO runs (subject_uid, user_name, program_path, program_sha256, permissions, gid, strict,
                    started_usec)
                VALUES (?, ?, ?, ?, ?, 0, ?, ?)
                """).run([
                .uid(new.subject.uid), .text(new.subject.name), .text(new.program.path), .optional(new.program.sha256),
                .text(new.permissions.map(\.rawValue).joined(separator: " ")), .integer(new.strict ? 1 : 0),
                .integer(time),
            ])
            let id = db.lastInsertRowID
            try db.prepare("UPDATE runs SET gid = ? WHERE id = ?").run([.uid(Run.groupID(forRun: id)), .integer(id)])
            guard let run = try RunRow.query(db, where: "id = ?", [.integer(id)]).first else {
                throw .invalidRow(path: db.path, table: "runs", rowID: id, problem: "vanished right after insert")
            }
            return run
        }
    }

    /// The run's program process exists (held before exec): recorded, audited as `run_start`
    /// with `details` (the grants it uses, how each was decided).
    @discardableResult
    public func runStarted(_ id: Int64, process: ProcessHolder, details: [String: String] = [:],
                           at now: Date = Date()) throws(LedgerError) -> Run {
        try write { db, audit throws(LedgerError) in
            try db.prepare("UPDATE runs SET pid = ?, start_ticks = ?, boot_id = ? WHERE id = ? AND ended_usec IS NULL")
                .run([.integer(Int64(process.pid)), .integer(Int64(clamping: process.startTicks)),
                      .text(process.bootID), .integer(id)])
            guard db.changes == 1, let run = try RunRow.query(db, where: "id = ?", [.integer(id)]).first else {
                throw .invalidArgument("run \(id) is not being started (unknown or ended)")
            }
            try audit.append(AuditEvent(type: .runStart, time: now, actor: run.subject, subject: run.subject,
                                        program: run.program.path,
                                        details: RunRow.auditDetails(run).merging(details) { _, added in added }))
            return run
        }
    }

    /// Ends runs: one `run_end` event each with the status and the duration. Runs already
    /// ended are skipped; the ended ones are returned.
    @discardableResult
    public func endRuns(_ endings: [(runID: Int64, status: String)], by actor: Principal?,
                        at now: Date = Date()) throws(LedgerError) -> [Run] {
        let time = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            let update = try db.prepare("UPDATE runs SET ended_usec = ?, end_status = ? WHERE id = ?")
            var ended: [Run] = []
            for ending in endings {
                guard var run = try RunRow.query(db, where: "id = ? AND ended_usec IS NULL", [.integer(ending.runID)])
                    .first else { continue }
                let status = StoredText.capped(ending.status)
                try update.run([.integer(time), .text(status), .integer(run.id)])
                run.ended = Timestamp.date(time)
                run.endStatus = status
                var details = RunRow.auditDetails(run)
                details["end_status"] = status
                details["duration_usec"] = String(max(0, time - ((try? Timestamp.microseconds(run.started)) ?? time)))
                try audit.append(AuditEvent(type: .runEnd, time: now, actor: actor, subject: run.subject,
                                            program: run.program.path, details: details))
                ended.append(run)
            }
            return ended
        }
    }

    /// Runs not ended (also those still being started), oldest first; or every run of `uid`
    /// with `includeEnded`.
    public func runs(uid: UInt32? = nil, includeEnded: Bool = false) throws(LedgerError) -> [Run] {
        var conditions = ["1"]
        var values: [SQLValue] = []
        if let uid {
            conditions.append("subject_uid = ?")
            values.append(.uid(uid))
        }
        if !includeEnded { conditions.append("ended_usec IS NULL") }
        let clause = conditions.joined(separator: " AND ")
        return try read { db throws(LedgerError) in try RunRow.query(db, where: clause, values) }
    }

    /// The newest run, ended or not, that was handed group id `gid`: whose process carries
    /// it. Ids wrap only after the whole range and never while a live process holds one.
    public func run(gid: UInt32) throws(LedgerError) -> Run? {
        try read { db throws(LedgerError) in
            try RunRow.query(db, where: "id = (SELECT MAX(id) FROM runs WHERE gid = ?)", [.uid(gid)]).first
        }
    }

    public func run(id: Int64) throws(LedgerError) -> Run? {
        try read { db throws(LedgerError) in try RunRow.query(db, where: "id = ?", [.integer(id)]).first }
    }
}

/// Reading `runs` rows.
enum RunRow {
    static let columns = """
        id, subject_uid, user_name, program_path, program_sha256, permissions, gid, strict, pid, start_ticks, \
        boot_id, started_usec, ended_usec, end_status
        """

    static func read(_ row: borrowing SQLiteStatement, path: String) throws(LedgerError) -> Run {
        let id = row.int64(0) ?? -1
        func bad(_ problem: String) -> LedgerError { .invalidRow(path: path, table: "runs", rowID: id, problem: problem) }
        guard let uid = row.int64(1).flatMap(UInt32.init(exactly:)) else { throw bad("subject_uid is not a uid") }
        guard let name = row.text(2), let program = row.text(3) else { throw bad("user_name or program_path is NULL") }
        let permissions = (row.text(5) ?? "").split(separator: " ").map { Permission(rawValue: String($0)) }
        guard !permissions.isEmpty else { throw bad("permissions is empty") }
        guard let gid = row.int64(6).flatMap(UInt32.init(exactly:)) else { throw bad("gid is not a gid") }
        guard let started = row.int64(11) else { throw bad("started_usec is NULL") }
        var process: ProcessHolder?
        switch (row.int64(8), row.int64(9), row.text(10)) {
        case (nil, nil, nil): break
        case (let pid?, let start?, let boot?):
            guard let pid = Int32(exactly: pid), pid > 0, start >= 0 else { throw bad("pid/start_ticks out of range") }
            process = ProcessHolder(pid: pid, startTicks: UInt64(start), bootID: boot)
        default: throw bad("pid, start_ticks and boot_id are not all set")
        }
        return Run(id: id, subject: Principal(uid: uid, name: name), program: Program(path: program, sha256: row.text(4)),
                   permissions: permissions, gid: gid, strict: row.int64(7) == 1, process: process,
                   started: Timestamp.date(started), ended: row.int64(12).map(Timestamp.date), endStatus: row.text(13))
    }

    static func query(_ db: borrowing SQLiteDatabase, where clause: String, _ values: [SQLValue]) throws(LedgerError)
        -> [Run]
    {
        let statement = try db.prepare("SELECT \(columns) FROM runs WHERE \(clause) ORDER BY id")
        try statement.bind(values)
        var runs: [Run] = []
        while try statement.step() { runs.append(try read(statement, path: db.path)) }
        return runs
    }

    static func auditDetails(_ run: Run) -> [String: String] {
        var details = ["run_id": String(run.id), "gid": String(run.gid),
                       "permissions": run.permissions.map(\.rawValue).joined(separator: " ")]
        if run.strict { details["strict"] = "true" }
        if let sha = run.program.sha256 { details["program_sha256"] = sha }
        if let process = run.process {
            details["pid"] = String(process.pid)
            details["start_ticks"] = String(process.startTicks)
        }
        return details
    }
}
