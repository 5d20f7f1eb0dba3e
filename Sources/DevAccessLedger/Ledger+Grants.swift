import FoundationEssentials
import Glibc
import DevAccessCore

/// Decisions: record, revoke, reset, and the queries status and reconcile need.
/// Every change is audited in the same transaction as the row it changes.
extension Ledger {
    /// Stores a decision. Audited as `grant` when an admin decided, else `decision`.
    @discardableResult
    public func recordGrant(_ new: NewGrant, at now: Date = Date()) throws(LedgerError) -> Grant {
        try Self.validate(new, now: now)
        let created = try Timestamp.microseconds(now)
        let expires = try new.expires.map { (date: Date) throws(LedgerError) in try Timestamp.microseconds(date) }
        return try write { db, audit throws(LedgerError) in
            try Self.insertGrant(new, created: created, expires: expires, now: now, db, &audit)
        }
    }

    /// `recordGrant`'s part inside an open write transaction (also an approval's).
    static func insertGrant(_ new: NewGrant, created: Int64, expires: Int64?, now: Date, _ db: borrowing SQLiteDatabase,
                            _ audit: inout AuditWriter) throws(LedgerError) -> Grant {
        let insert = try db.prepare("""
            INSERT INTO grants (subject_uid, user_name, program_path, program_sha256, permission, device_id,
                decision, scope, created_usec, expires_usec, decided_by_uid, decided_by_name, how, reason,
                holder_pid, holder_start, holder_boot, accuracy)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        try insert.run([
            .uid(new.subject.uid), .text(new.subject.name), .optional(new.program?.path),
            .optional(new.program?.sha256), .text(new.permission.rawValue), .optional(new.deviceID),
            .text(new.decision.rawValue), .text(new.scope.recordedName), .integer(created), .optional(expires),
            .uid(new.decidedBy.uid), .text(new.decidedBy.name), .text(new.method.rawValue),
            .text(StoredText.capped(new.reason)),
            new.holder.map { .integer(Int64($0.pid)) } ?? .null,
            new.holder.map { .integer(Int64(clamping: $0.startTicks)) } ?? .null, .optional(new.holder?.bootID),
            .optional(new.accuracy?.rawValue),
        ])
        let id = db.lastInsertRowID
        guard let grant = try GrantRow.query(db, where: "id = ?", [.integer(id)]).first else {
            throw .invalidRow(path: db.path, table: "grants", rowID: id, problem: "vanished right after insert")
        }
        try audit.append(AuditEvent(
            type: new.method == .admin ? .grant : .decision, time: now, actor: new.decidedBy,
            subject: new.subject, permission: new.permission, deviceID: new.deviceID,
            program: new.program?.path, details: GrantRow.auditDetails(grant)))
        return grant
    }

    /// Ends the active *allow* grants of `uid` for `permission` (only those for `deviceID`
    /// when given, only those in `only` when given). Denials stay: forgetting a denial is
    /// `reset`. Returns what was revoked, so the caller can remove the ACL entries; nothing
    /// active = nothing written.
    @discardableResult
    public func revoke(permission: Permission, uid: UInt32, deviceID: String? = nil, by actor: Principal,
                       reason: String = "", at now: Date = Date(), only: Set<Int64>? = nil) throws(LedgerError) -> [Grant] {
        let time = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            try Self.endAllows(permission: permission, uid: uid, deviceID: deviceID, by: actor, reason: reason, now: now,
                               time: time, only: only, db, &audit)
        }
    }

    /// `revoke`'s part inside an open write transaction (also an approval's).
    static func endAllows(permission: Permission, uid: UInt32, deviceID: String?, by actor: Principal, reason: String,
                          now: Date, time: Int64, only: Set<Int64>?, _ db: borrowing SQLiteDatabase,
                          _ audit: inout AuditWriter) throws(LedgerError) -> [Grant] {
        var clause = """
            subject_uid = ? AND permission = ? AND decision = 'allow' AND revoked_usec IS NULL \
            AND (expires_usec IS NULL OR expires_usec > ?)
            """
        var values: [SQLValue] = [.uid(uid), .text(permission.rawValue), .integer(time)]
        if let deviceID {
            clause += " AND device_id = ?"
            values.append(.text(deviceID))
        }
        if let only { Self.restrict(&clause, &values, to: only) }
        let targets = try GrantRow.query(db, where: clause, values)
        let update = try db.prepare("UPDATE grants SET revoked_usec = ? WHERE id = ?")
        var revoked: [Grant] = []
        for var grant in targets {
            try update.run([.integer(time), .integer(grant.id)])
            grant.revoked = Timestamp.date(time)
            var details = GrantRow.auditDetails(grant)
            if !reason.isEmpty { details["revoke_reason"] = StoredText.capped(reason) }
            try audit.append(AuditEvent(
                type: .revoke, time: now, actor: actor, subject: grant.subject, permission: permission,
                deviceID: grant.deviceID, program: grant.program?.path, details: details))
            revoked.append(grant)
        }
        return revoked
    }

    /// Forgets every decision (allow or deny, active or not) of `subject`, for one
    /// permission or all, so the next request asks again. The deleted rows are listed in
    /// the `reset` event and returned.
    /// With `only`, just those rows (an ending recorded late forgets what it forgot then,
    /// never a decision made since).
    @discardableResult
    public func reset(subject: Principal, permission: Permission? = nil, by actor: Principal,
                      onlyDecidedBySubject: Bool = false, at now: Date = Date(),
                      only: Set<Int64>? = nil) throws(LedgerError) -> [Grant] {
        _ = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            var clause = "subject_uid = ?"
            var values: [SQLValue] = [.uid(subject.uid)]
            if let permission {
                clause += " AND permission = ?"
                values.append(.text(permission.rawValue))
            }
            if onlyDecidedBySubject {
                // A user's own reset: what they decided themselves at a prompt, nothing an
                // administrator or the policy recorded.
                clause += " AND decided_by_uid = subject_uid AND how IN ('consent', 'auth_self')"
            }
            if let only { Self.restrict(&clause, &values, to: only) }
            let deleted = try GrantRow.query(db, where: clause, values, orderBy: "id")
            try db.prepare("DELETE FROM grants WHERE \(clause)").run(values)
            try audit.append(AuditEvent(
                type: .reset, time: now, actor: actor, subject: subject, permission: permission,
                details: ["deleted": String(deleted.count),
                          "grant_ids": deleted.map { String($0.id) }.joined(separator: ",")]))
            return deleted
        }
    }

    /// Narrows a grants `WHERE` clause to the rows with these ids (none: no row).
    private static func restrict(_ clause: inout String, _ values: inout [SQLValue], to ids: Set<Int64>) {
        guard !ids.isEmpty else {
            clause += " AND 0"
            return
        }
        clause += " AND id IN (" + Array(repeating: "?", count: ids.count).joined(separator: ", ") + ")"
        values += ids.sorted().map { .integer($0) }
    }

    /// Decisions, newest first; by default only those standing at `now`.
    public func grants(uid: UInt32? = nil, permission: Permission? = nil, includeInactive: Bool = false,
                       now: Date = Date()) throws(LedgerError) -> [Grant] {
        let time = try Timestamp.microseconds(now)
        var conditions = ["1"]
        var values: [SQLValue] = []
        if let uid {
            conditions.append("subject_uid = ?")
            values.append(.uid(uid))
        }
        if let permission {
            conditions.append("permission = ?")
            values.append(.text(permission.rawValue))
        }
        if !includeInactive {
            conditions.append("revoked_usec IS NULL AND (expires_usec IS NULL OR expires_usec > ?)")
            values.append(.integer(time))
        }
        let clause = conditions.joined(separator: " AND ")
        return try read { db throws(LedgerError) in try GrantRow.query(db, where: clause, values) }
    }

    /// The decisions (allow and deny) standing for `uid` and `permission` at `now`, newest first.
    public func activeGrants(uid: UInt32, permission: Permission, now: Date = Date()) throws(LedgerError) -> [Grant] {
        try grants(uid: uid, permission: permission, includeInactive: false, now: now)
    }

    /// Grants whose expiry has passed but that were never ended: what reconcile must
    /// remove (e.g. after the daemon was down). Oldest expiry first.
    public func expiredUnrevoked(now: Date = Date()) throws(LedgerError) -> [Grant] {
        let time = try Timestamp.microseconds(now)
        return try read { db throws(LedgerError) in
            try GrantRow.query(db, where: "revoked_usec IS NULL AND expires_usec IS NOT NULL AND expires_usec <= ?",
                               [.integer(time)], orderBy: "expires_usec, id")
        }
    }

    /// Ends the given grants as expired (one `expiry` event each). Ids that are unknown,
    /// already ended or not yet expired at `now` are skipped; the ended grants are returned.
    @discardableResult
    public func markExpired(_ ids: [Int64], by actor: Principal? = nil, at now: Date = Date()) throws(LedgerError) -> [Grant] {
        let time = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            let update = try db.prepare("UPDATE grants SET revoked_usec = ? WHERE id = ?")
            var ended: [Grant] = []
            for id in ids {
                let clause = "id = ? AND revoked_usec IS NULL AND expires_usec IS NOT NULL AND expires_usec <= ?"
                guard var grant = try GrantRow.query(db, where: clause, [.integer(id), .integer(time)]).first else { continue }
                try update.run([.integer(time), .integer(id)])
                grant.revoked = Timestamp.date(time)
                try audit.append(AuditEvent(
                    type: .expiry, time: now, actor: actor, subject: grant.subject, permission: grant.permission,
                    deviceID: grant.deviceID, program: grant.program?.path, details: GrantRow.auditDetails(grant)))
                ended.append(grant)
            }
            return ended
        }
    }

    /// Why a policy ends a grant: the sentence and the rule (`file:line`, nil for the
    /// built-in default).
    public struct PolicyEnding: Sendable, Hashable {
        public var grantID: Int64
        public var reason: String
        public var rule: String?

        public init(grantID: Int64, reason: String, rule: String?) {
            self.grantID = grantID
            self.reason = reason
            self.rule = rule
        }
    }

    /// Ends standing allow grants because the policy now forbids them: one `revoke` event
    /// each, `ended_by=policy` with the rule and the sentence, `actor` being the process
    /// that applied the policy. Grants already ended are skipped; the ended ones are returned.
    @discardableResult
    public func endByPolicy(_ endings: [PolicyEnding], by actor: Principal,
                            at now: Date = Date()) throws(LedgerError) -> [Grant] {
        try end(endings.map { ending in
            var details = ["ended_by": "policy", "revoke_reason": ending.reason]
            if let rule = ending.rule { details["policy_rule"] = rule }
            return (ending.grantID, details)
        }, standing: "decision = 'allow'", as: .revoke, by: actor, at: now)
    }

    /// Ends standing `once` grants whose process is gone: their term is over, so one `expiry`
    /// event each, with `ended_by=process-exit` and the sentence saying why (the process
    /// exited, its pid now names another process, the machine was restarted).
    /// Grants already ended are skipped; the ended ones are returned.
    @discardableResult
    public func endWithProcess(_ endings: [(grantID: Int64, reason: String)], by actor: Principal,
                               at now: Date = Date()) throws(LedgerError) -> [Grant] {
        try end(endings.map { ($0.grantID, ["ended_by": "process-exit", "end_reason": $0.reason]) },
                standing: "holder_pid IS NOT NULL", as: .expiry, by: actor, at: now)
    }

    /// Ends the grants named, if they still stand and match `condition`: one `type` event
    /// each, with the grant's details and `details` added.
    private func end(_ endings: [(grantID: Int64, details: [String: String])], standing condition: String,
                     as type: AuditEventType, by actor: Principal, at now: Date) throws(LedgerError) -> [Grant] {
        let time = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            let update = try db.prepare("UPDATE grants SET revoked_usec = ? WHERE id = ?")
            var ended: [Grant] = []
            for ending in endings {
                let clause = "id = ? AND \(condition) AND revoked_usec IS NULL "
                    + "AND (expires_usec IS NULL OR expires_usec > ?)"
                guard var grant = try GrantRow.query(db, where: clause, [.integer(ending.grantID), .integer(time)]).first
                else { continue }
                try update.run([.integer(time), .integer(grant.id)])
                grant.revoked = Timestamp.date(time)
                let details = GrantRow.auditDetails(grant).merging(ending.details) { _, added in added }
                try audit.append(AuditEvent(
                    type: type, time: now, actor: actor, subject: grant.subject, permission: grant.permission,
                    deviceID: grant.deviceID, program: grant.program?.path, details: details))
                ended.append(grant)
            }
            return ended
        }
    }

    static func validate(_ new: NewGrant, now: Date) throws(LedgerError) {
        if new.permission.rawValue.isEmpty { throw .invalidArgument("the permission name is empty") }
        switch (new.scope, new.expires) {
        case (.duration, nil):
            throw .invalidArgument("scope 'until' needs an expiry time")
        case (.always, _?):
            throw .invalidArgument("scope 'always' cannot have an expiry time (use 'until')")
        case (_, let expires?) where expires <= now:
            throw .invalidArgument("the expiry time is not in the future")
        default:
            break
        }
        if new.accuracy != nil && new.permission != .location {
            throw .invalidArgument("an accuracy goes with location only, not \(new.permission.rawValue)")
        }
        if new.accuracy != nil && new.decision == .deny {
            throw .invalidArgument("a denial of location has no accuracy: it gives no location at all")
        }
        if new.holder != nil && new.scope != .once {
            throw .invalidArgument("only a 'once' grant lasts for a process")
        }
        if let sha = new.program?.sha256 {
            guard sha.utf8.count == 64, Hex.decode(sha.utf8) != nil else {
                throw .invalidArgument("program SHA-256 '\(sha)' is not 64 hex digits")
            }
        }
        if let path = new.program?.path, !path.hasPrefix("/") {
            throw .invalidArgument("program path '\(path)' is not absolute")
        }
    }
}
