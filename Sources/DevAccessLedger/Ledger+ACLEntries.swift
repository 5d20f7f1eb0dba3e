import FoundationEssentials
import Glibc
import DevAccessCore

/// The record of ACL entries devaccess created (schema version 2).
extension Ledger {
    /// Records that devaccess added `entry` (replacing an older record for the same node
    /// and user/group) and audits `acl_add`. Call it after the ACL edit succeeded.
    @discardableResult
    public func recordACLEntryAdded(_ entry: NewACLEntry, by actor: Principal, subject: Principal? = nil,
                                    permission: Permission? = nil, deviceName: String? = nil,
                                    at now: Date = Date()) throws(LedgerError) -> ACLEntryRecord {
        let created = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            let (clause, qualifierValue) = ACLEntryRow.qualifierClause(entry.qualifier)
            try db.prepare("DELETE FROM acl_entries WHERE node_path = ? AND \(clause)")
                .run([.text(entry.nodePath), qualifierValue])
            let ids = ACLEntryRow.qualifierValues(entry.qualifier)
            try db.prepare("""
                INSERT INTO acl_entries (node_path, device_id, major, minor, uid, gid, permissions, grant_id, created_usec)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).run([
                    .text(entry.nodePath), .text(entry.deviceID), .uid(entry.major), .uid(entry.minor), ids.uid, ids.gid,
                    .text(entry.permissions.symbolic), .optional(entry.grantID), .integer(created),
                ])
            let record = ACLEntryRecord(
                id: db.lastInsertRowID, nodePath: entry.nodePath, deviceID: entry.deviceID, major: entry.major,
                minor: entry.minor, qualifier: entry.qualifier, permissions: entry.permissions,
                grantID: entry.grantID, created: Timestamp.date(created))
            try audit.append(Self.aclEvent(.aclAdd, record, actor: actor, subject: subject, permission: permission,
                                           deviceName: deviceName, time: now))
            return record
        }
    }

    /// Forgets the record of devaccess's entry for `qualifier` on `nodePath`, whichever
    /// record that is now, and audits `acl_remove`. Returns the record, or nil (and writes
    /// nothing) when there was none. A caller holding the record it read should use
    /// `recordACLEntryRemoved(_:by:...)`, which leaves a record another writer replaced.
    @discardableResult
    public func recordACLEntryRemoved(nodePath: String, qualifier: ACLEntryRecord.Qualifier, by actor: Principal,
                                      subject: Principal? = nil, permission: Permission? = nil,
                                      deviceName: String? = nil, at now: Date = Date()) throws(LedgerError)
        -> ACLEntryRecord?
    {
        _ = try Timestamp.microseconds(now)
        return try write { db, audit throws(LedgerError) in
            let (clause, qualifierValue) = ACLEntryRow.qualifierClause(qualifier)
            let select = try db.prepare("SELECT \(ACLEntryRow.columns) FROM acl_entries WHERE node_path = ? AND \(clause)")
            try select.bind([.text(nodePath), qualifierValue])
            guard try select.step() else { return nil }
            let record = try ACLEntryRow.read(select, path: db.path)
            try db.prepare("DELETE FROM acl_entries WHERE id = ?").run([.integer(record.id)])
            try audit.append(Self.aclEvent(.aclRemove, record, actor: actor, subject: subject, permission: permission,
                                           deviceName: deviceName, time: now))
            return record
        }
    }

    /// Compare-and-delete: forgets `record`, as the caller read it, and audits `acl_remove`,
    /// only if that very record is still there. Returns nil (and writes nothing) when it is
    /// gone or was replaced, e.g. by another process re-adding an entry for the same node
    /// and qualifier between the caller's read and this call: that newer record stays.
    ///
    /// "That very record" is the same id, node, qualifier, grant and creation time. The id
    /// alone is not enough: `acl_entries.id` is a plain rowid, and SQLite hands a deleted
    /// highest id to the next insert, which is exactly what a replacement does.
    @discardableResult
    public func recordACLEntryRemoved(_ record: ACLEntryRecord, by actor: Principal, subject: Principal? = nil,
                                      permission: Permission? = nil, deviceName: String? = nil,
                                      at now: Date = Date()) throws(LedgerError) -> ACLEntryRecord?
    {
        _ = try Timestamp.microseconds(now)
        let created = try Timestamp.microseconds(record.created)
        return try write { db, audit throws(LedgerError) in
            let (qualifier, qualifierValue) = ACLEntryRow.qualifierClause(record.qualifier)
            let match = "id = ? AND node_path = ? AND \(qualifier) AND grant_id IS ? AND created_usec = ?"
            let values: [SQLValue] = [.integer(record.id), .text(record.nodePath), qualifierValue,
                                      .optional(record.grantID), .integer(created)]
            let select = try db.prepare("SELECT \(ACLEntryRow.columns) FROM acl_entries WHERE \(match)")
            try select.bind(values)
            guard try select.step() else { return nil }
            // The write transaction holds the lock from this SELECT to the DELETE: no writer
            // can slip in between, so the row audited is the row deleted.
            let stored = try ACLEntryRow.read(select, path: db.path)
            try db.prepare("DELETE FROM acl_entries WHERE \(match)").run(values)
            try audit.append(Self.aclEvent(.aclRemove, stored, actor: actor, subject: subject, permission: permission,
                                           deviceName: deviceName, time: now))
            return stored
        }
    }

    /// Recorded entries, optionally for one device, node or grant, oldest first.
    public func aclEntries(deviceID: String? = nil, nodePath: String? = nil, grantID: Int64? = nil)
        throws(LedgerError) -> [ACLEntryRecord]
    {
        var conditions = ["1"]
        var values: [SQLValue] = []
        if let deviceID {
            conditions.append("device_id = ?")
            values.append(.text(deviceID))
        }
        if let nodePath {
            conditions.append("node_path = ?")
            values.append(.text(nodePath))
        }
        if let grantID {
            conditions.append("grant_id = ?")
            values.append(.integer(grantID))
        }
        let clause = conditions.joined(separator: " AND ")
        return try read { db throws(LedgerError) in
            let statement = try db.prepare("SELECT \(ACLEntryRow.columns) FROM acl_entries WHERE \(clause) ORDER BY id")
            try statement.bind(values)
            var records: [ACLEntryRecord] = []
            while try statement.step() { records.append(try ACLEntryRow.read(statement, path: db.path)) }
            return records
        }
    }

    private static func aclEvent(_ type: AuditEventType, _ record: ACLEntryRecord, actor: Principal,
                                 subject: Principal?, permission: Permission?, deviceName: String?, time: Date)
        -> AuditEvent
    {
        var details = ["major": String(record.major), "minor": String(record.minor),
                       "permissions": record.permissions.symbolic]
        switch record.qualifier {
        case .user(let uid): details["acl_user"] = String(uid)
        case .group(let gid): details["acl_group"] = String(gid)
        }
        if let grantID = record.grantID { details["grant_id"] = String(grantID) }
        return AuditEvent(type: type, time: time, actor: actor, subject: subject, permission: permission,
                          deviceID: record.deviceID, deviceName: deviceName, nodePath: record.nodePath, details: details)
    }
}
