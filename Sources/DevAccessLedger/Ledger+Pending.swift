import FoundationEssentials
import Glibc
import DevAccessCore

/// Requests waiting for an administrator (policy auth_admin): queue, list, resolve.
/// Each change is audited in the same transaction as its row, one event per permission
/// so that `audit --permission` finds it.
extension Ledger {
    /// Queues a request; audited as `approval_queued`.
    @discardableResult
    public func queueRequest(_ new: NewPendingRequest, at now: Date = Date()) throws(LedgerError) -> PendingRequest {
        try PendingRow.validate(new)
        let created = try Timestamp.microseconds(now)
        let (scope, duration) = PendingRow.columns(new.scope)
        return try write { db, audit throws(LedgerError) in
            let insert = try db.prepare("""
                INSERT INTO pending_requests (subject_uid, user_name, program_path, permissions, scope, duration_sec,
                    reason, created_usec, holder_pid, holder_start, holder_boot, accuracy)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            try insert.run([
                .uid(new.subject.uid), .text(new.subject.name), .optional(new.program),
                .text(new.permissions.map(\.rawValue).joined(separator: " ")), .optional(scope), .optional(duration),
                .text(StoredText.capped(new.reason)), .integer(created),
                new.holder.map { .integer(Int64($0.pid)) } ?? .null,
                new.holder.map { .integer(Int64(clamping: $0.startTicks)) } ?? .null, .optional(new.holder?.bootID),
                .optional(new.accuracy?.rawValue),
            ])
            let id = db.lastInsertRowID
            guard let request = try PendingRow.query(db, where: "id = ?", [.integer(id)]).first else {
                throw .invalidRow(path: db.path, table: "pending_requests", rowID: id, problem: "vanished right after insert")
            }
            for permission in request.permissions {
                try audit.append(AuditEvent(type: .approvalQueued, time: now, actor: new.subject, subject: new.subject,
                                            permission: permission, program: new.program,
                                            details: PendingRow.auditDetails(request)))
            }
            return request
        }
    }

    /// Requests still waiting (or all, with `includeResolved`), oldest first.
    public func pendingRequests(uid: UInt32? = nil, includeResolved: Bool = false) throws(LedgerError) -> [PendingRequest] {
        var conditions = ["1"]
        var values: [SQLValue] = []
        if let uid {
            conditions.append("subject_uid = ?")
            values.append(.uid(uid))
        }
        if !includeResolved { conditions.append("resolved_usec IS NULL") }
        let clause = conditions.joined(separator: " AND ")
        return try read { db throws(LedgerError) in try PendingRow.query(db, where: clause, values) }
    }

    /// The request with `id`, waiting or resolved; nil when there is none.
    public func pendingRequest(id: Int64) throws(LedgerError) -> PendingRequest? {
        try read { db throws(LedgerError) in try PendingRow.query(db, where: "id = ?", [.integer(id)]).first }
    }

    /// Ends a waiting request. Refused (nothing written) when it does not exist or was
    /// already resolved, so two administrators cannot both resolve it. Audited as a
    /// `request` event per permission with `stage` = the resolution.
    @discardableResult
    public func resolvePendingRequest(id: Int64, as resolution: PendingResolution, by actor: Principal,
                                      note: String = "", at now: Date = Date()) throws(LedgerError) -> PendingRequest {
        let time = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            try Self.markResolved(id, as: resolution, by: actor, note: note, now: now, time: time, db, &audit)
        }
    }

    /// An approval or a rejection with a denial, as one transaction: each decision (an allow
    /// ends the standing allows it replaces first; a denial is written before the allows it
    /// ends), then the request marked resolved. A crash leaves all of it or none: never a
    /// request still waiting beside the grant that approved it (which a later `decline`
    /// or `withdraw` would contradict), nor an approved request without its grant.
    ///
    /// `notTaken` names the permissions of the request for which no decision is written,
    /// with why (an approval of a permission the policy forbids by now): their audit
    /// events say `outcome=not-granted` and that reason, not only `stage=approved`.
    public func recordResolution(_ id: Int64, as resolution: PendingResolution, decisions: [ResolutionDecision],
                                 notTaken: [Permission: String] = [:],
                                 by actor: Principal, note: String = "", at now: Date = Date())
        throws(LedgerError) -> (request: PendingRequest, recorded: [(grant: Grant, ended: [Grant])])
    {
        let time = try Timestamp.microseconds(now)
        var stamps: [(created: Int64, expires: Int64?)] = []
        for decision in decisions {
            try Self.validate(decision.grant, now: now)
            stamps.append((time, try decision.grant.expires.map { (date: Date) throws(LedgerError) in
                try Timestamp.microseconds(date)
            }))
        }
        return try write { db, audit throws(LedgerError) in
            // Refused before anything is written when it was resolved meanwhile.
            try Self.requireWaiting(id, db)
            var recorded: [(grant: Grant, ended: [Grant])] = []
            for (decision, stamp) in zip(decisions, stamps) {
                let new = decision.grant
                if new.decision == .allow {
                    let ended = try Self.endAllows(permission: new.permission, uid: new.subject.uid,
                                                   deviceID: new.deviceID, by: actor, reason: "replaced by a new grant",
                                                   now: now, time: time, only: decision.ends, db, &audit)
                    let grant = try Self.insertGrant(new, created: stamp.created, expires: stamp.expires, now: now, db,
                                                     &audit)
                    recorded.append((grant, ended))
                } else {
                    let grant = try Self.insertGrant(new, created: stamp.created, expires: stamp.expires, now: now, db,
                                                     &audit)
                    let ended = try Self.endAllows(permission: new.permission, uid: new.subject.uid,
                                                   deviceID: new.deviceID, by: actor, reason: "denied by grant \(grant.id)",
                                                   now: now, time: time, only: decision.ends, db, &audit)
                    recorded.append((grant, ended))
                }
            }
            let request = try Self.markResolved(id, as: resolution, by: actor, note: note, notTaken: notTaken,
                                                now: now, time: time, db, &audit)
            return (request, recorded)
        }
    }

    private static func requireWaiting(_ id: Int64, _ db: borrowing SQLiteDatabase) throws(LedgerError) {
        guard let request = try PendingRow.query(db, where: "id = ?", [.integer(id)]).first else {
            throw .invalidArgument("there is no pending request \(id)")
        }
        if let earlier = request.resolution {
            throw .invalidArgument("request \(id) was already \(earlier.rawValue)"
                + (request.resolvedBy.map { " by \($0)" } ?? ""))
        }
    }

    /// `resolvePendingRequest`'s part inside an open write transaction.
    private static func markResolved(_ id: Int64, as resolution: PendingResolution, by actor: Principal, note: String,
                                     notTaken: [Permission: String] = [:],
                                     now: Date, time: Int64, _ db: borrowing SQLiteDatabase,
                                     _ audit: inout AuditWriter) throws(LedgerError) -> PendingRequest {
        guard var request = try PendingRow.query(db, where: "id = ?", [.integer(id)]).first else {
            throw .invalidArgument("there is no pending request \(id)")
        }
        if let earlier = request.resolution {
            throw .invalidArgument("request \(id) was already \(earlier.rawValue)"
                + (request.resolvedBy.map { " by \($0)" } ?? ""))
        }
        try db.prepare("""
            UPDATE pending_requests SET resolved_usec = ?, resolution = ?, resolved_by_uid = ?, resolved_by_name = ?
            WHERE id = ? AND resolved_usec IS NULL
            """).run([.integer(time), .text(resolution.rawValue), .uid(actor.uid), .text(actor.name), .integer(id)])
        request.resolution = resolution
        request.resolved = Timestamp.date(time)
        request.resolvedBy = actor
        var details = PendingRow.auditDetails(request)
        details["stage"] = resolution.rawValue
        if !note.isEmpty { details["note"] = StoredText.capped(note) }
        for permission in request.permissions {
            var event = details
            if let why = notTaken[permission] {
                event["outcome"] = "not-granted"
                event["why"] = StoredText.capped(why)
            }
            try audit.append(AuditEvent(type: .request, time: now, actor: actor, subject: request.subject,
                                        permission: permission, program: request.program, details: event))
        }
        return request
    }
}

/// One decision of an approval or rejection (`recordResolution`): the row to write and the
/// standing allow grants it ends (the ones the engine found covered).
public struct ResolutionDecision: Sendable, Hashable {
    public var grant: NewGrant
    public var ends: Set<Int64>

    public init(grant: NewGrant, ends: Set<Int64>) {
        self.grant = grant
        self.ends = ends
    }
}

/// Reading and writing `pending_requests` rows.
enum PendingRow {
    static let columns = """
        id, subject_uid, user_name, program_path, permissions, scope, duration_sec, reason, created_usec, \
        resolved_usec, resolution, resolved_by_uid, resolved_by_name, holder_pid, holder_start, holder_boot, accuracy
        """

    static func validate(_ new: NewPendingRequest) throws(LedgerError) {
        guard !new.permissions.isEmpty else { throw .invalidArgument("a pending request needs at least one permission") }
        guard Set(new.permissions).count == new.permissions.count else {
            throw .invalidArgument("a pending request lists a permission twice")
        }
        for permission in new.permissions where permission.rawValue.isEmpty || permission.rawValue.contains(" ") {
            throw .invalidArgument("'\(permission.rawValue)' cannot be stored as a permission name")
        }
        if case .duration(let seconds) = new.scope, seconds <= 0 {
            throw .invalidArgument("a pending request's duration must be positive")
        }
        if let path = new.program, !path.hasPrefix("/") {
            throw .invalidArgument("program path '\(path)' is not absolute")
        }
        if new.accuracy != nil && !new.permissions.contains(.location) {
            throw .invalidArgument("a pending request's accuracy goes with location, which it does not ask for")
        }
    }

    /// The `scope` and `duration_sec` columns: the term's word, and its seconds with `for`.
    static func columns(_ scope: GrantTerm?) -> (String?, Int64?) {
        (scope?.word.rawValue, scope?.seconds)
    }

    static func read(_ row: borrowing SQLiteStatement, path: String) throws(LedgerError) -> PendingRequest {
        let id = row.int64(0) ?? -1
        func bad(_ problem: String) -> LedgerError {
            .invalidRow(path: path, table: "pending_requests", rowID: id, problem: problem)
        }
        guard let uid = row.int64(1).flatMap(UInt32.init(exactly:)) else { throw bad("subject_uid is not a uid") }
        guard let name = row.text(2) else { throw bad("user_name is NULL") }
        guard let list = row.text(4), !list.isEmpty else { throw bad("permissions is empty") }
        let scope: GrantTerm?
        switch (row.text(5), row.int64(6)) {
        case (nil, nil): scope = nil
        case (let word?, let seconds):
            guard let term = GrantTerm.Word(rawValue: word).flatMap({ GrantTerm(word: $0, seconds: seconds) }) else {
                throw bad("scope and duration_sec do not fit together")
            }
            scope = term
        default: throw bad("scope and duration_sec do not fit together")
        }
        guard let created = row.int64(8) else { throw bad("created_usec is NULL") }
        var resolution: PendingResolution?
        if let text = row.text(10) {
            guard let known = PendingResolution(rawValue: text) else { throw bad("resolution '\(text)' is unknown") }
            resolution = known
        }
        var resolvedBy: Principal?
        if let byUID = row.int64(11).flatMap(UInt32.init(exactly:)), let byName = row.text(12) {
            resolvedBy = Principal(uid: byUID, name: byName)
        }
        var holder: ProcessHolder?
        if let pid = row.int64(13).flatMap(Int32.init(exactly:)), let start = row.int64(14), let boot = row.text(15),
           pid > 0, start >= 0 {
            holder = ProcessHolder(pid: pid, startTicks: UInt64(start), bootID: boot)
        }
        var accuracy: LocationAccuracy?
        if let text = row.text(16) {
            guard let level = LocationAccuracy(rawValue: text) else { throw bad("accuracy '\(text)' is not a level") }
            accuracy = level
        }
        return PendingRequest(
            id: id, subject: Principal(uid: uid, name: name), program: row.text(3),
            permissions: list.split(separator: " ").map { Permission(rawValue: String($0)) }, scope: scope,
            reason: row.text(7) ?? "", created: Timestamp.date(created), resolution: resolution,
            resolved: row.int64(9).map(Timestamp.date), resolvedBy: resolvedBy, holder: holder, accuracy: accuracy)
    }

    static func query(_ db: borrowing SQLiteDatabase, where clause: String,
                      _ values: [SQLValue]) throws(LedgerError) -> [PendingRequest] {
        let statement = try db.prepare("SELECT \(columns) FROM pending_requests WHERE \(clause) ORDER BY id")
        try statement.bind(values)
        var requests: [PendingRequest] = []
        while try statement.step() { requests.append(try read(statement, path: db.path)) }
        return requests
    }

    static func auditDetails(_ request: PendingRequest) -> [String: String] {
        var details = ["pending_id": String(request.id),
                       "permissions": request.permissions.map(\.rawValue).joined(separator: " ")]
        details.merge(GrantTerm.auditDetails(request.scope)) { $1 }
        if !request.reason.isEmpty { details["reason"] = request.reason }
        if let accuracy = request.accuracy { details["accuracy"] = accuracy.rawValue }
        return details
    }
}
