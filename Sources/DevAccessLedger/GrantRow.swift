import DevAccessCore

/// Reading and writing `grants` rows.
enum GrantRow {
    static let columns = """
        id, subject_uid, user_name, program_path, program_sha256, permission, device_id, decision, scope, \
        created_usec, expires_usec, revoked_usec, decided_by_uid, decided_by_name, how, reason, \
        holder_pid, holder_start, holder_boot, accuracy
        """

    /// Decodes the row the statement is on; any value this code would not have written
    /// is reported with the row id rather than guessed at.
    static func read(_ row: borrowing SQLiteStatement, path: String) throws(LedgerError) -> Grant {
        let id = row.int64(0) ?? -1
        func bad(_ problem: String) -> LedgerError {
            .invalidRow(path: path, table: "grants", rowID: id, problem: problem)
        }
        guard let subjectUID = row.int64(1).flatMap(UInt32.init(exactly:)) else { throw bad("subject_uid is not a uid") }
        guard let userName = row.text(2) else { throw bad("user_name is NULL") }
        guard let permission = row.text(5), !permission.isEmpty else { throw bad("permission is empty") }
        guard let decision = row.text(7).flatMap(Decision.init(rawValue:)) else { throw bad("decision is not allow/deny") }
        guard let scope = row.text(8).flatMap(GrantTerm.Word.init(recordedName:)) else { throw bad("scope is not once/until/always") }
        guard let created = row.int64(9) else { throw bad("created_usec is NULL") }
        guard let deciderUID = row.int64(12).flatMap(UInt32.init(exactly:)) else { throw bad("decided_by_uid is not a uid") }
        guard let deciderName = row.text(13) else { throw bad("decided_by_name is NULL") }
        guard let method = row.text(14).flatMap(DecisionMethod.init(rawValue:)) else { throw bad("how is not a known method") }
        let program = row.text(3).map { Program(path: $0, sha256: row.text(4)) }
        var holder: ProcessHolder?
        switch (row.int64(16), row.int64(17), row.text(18)) {
        case (nil, nil, nil): break
        case (let pid?, let start?, let boot?):
            guard let pid = Int32(exactly: pid), pid > 0, start >= 0 else { throw bad("holder_pid/holder_start out of range") }
            holder = ProcessHolder(pid: pid, startTicks: UInt64(start), bootID: boot)
        default: throw bad("holder_pid, holder_start and holder_boot are not all set")
        }
        var accuracy: LocationAccuracy?
        if let text = row.text(19) {
            guard let level = LocationAccuracy(rawValue: text) else { throw bad("accuracy '\(text)' is not a level") }
            accuracy = level
        }
        return Grant(
            id: id, subject: Principal(uid: subjectUID, name: userName), program: program,
            permission: Permission(rawValue: permission), deviceID: row.text(6), decision: decision, scope: scope,
            created: Timestamp.date(created), expires: row.int64(10).map(Timestamp.date),
            revoked: row.int64(11).map(Timestamp.date),
            decidedBy: Principal(uid: deciderUID, name: deciderName), method: method, reason: row.text(15) ?? "",
            holder: holder, accuracy: accuracy)
    }

    /// Runs a SELECT of `columns` and decodes every row.
    static func query(_ db: borrowing SQLiteDatabase, where clause: String, _ values: [SQLValue],
                      orderBy: String = "created_usec DESC, id DESC") throws(LedgerError) -> [Grant] {
        let statement = try db.prepare("SELECT \(columns) FROM grants WHERE \(clause) ORDER BY \(orderBy)")
        try statement.bind(values)
        var grants: [Grant] = []
        while try statement.step() { grants.append(try read(statement, path: db.path)) }
        return grants
    }

    /// The details every grant-related audit event carries.
    static func auditDetails(_ grant: Grant) -> [String: String] {
        var details = [
            "grant_id": String(grant.id), "decision": grant.decision.rawValue, "scope": grant.scope.recordedName,
            "how": grant.method.rawValue,
        ]
        if !grant.reason.isEmpty { details["reason"] = grant.reason }
        if let expires = grant.expires, let micro = try? Timestamp.microseconds(expires) {
            details["expires_usec"] = String(micro)
        }
        if let sha = grant.program?.sha256 { details["program_sha256"] = sha }
        if let holder = grant.holder {
            details["holder_pid"] = String(holder.pid)
            details["holder_start"] = String(holder.startTicks)
        }
        if let accuracy = grant.accuracy { details["accuracy"] = accuracy.rawValue }
        return details
    }
}
