import FoundationEssentials
import Glibc
import DevAccessCore

/// A permission switched off for everyone: no request is asked or granted, devaccess's
/// entries come off its capture nodes, and with `hard` everyone else's access too. A switch
/// that is on has no row.
public struct PrivacySwitch: Sendable, Hashable {
    public var permission: Permission
    /// Also takes away the access others gave (group bits, foreign ACL entries), saved to
    /// be put back when it is turned on.
    public var hard: Bool
    public var by: Principal
    public var since: Date
    /// When it turns itself back on; nil: when an admin says so.
    public var until: Date?
    public var reason: String

    public init(permission: Permission, hard: Bool, by: Principal, since: Date, until: Date? = nil, reason: String = "") {
        self.permission = permission
        self.hard = hard
        self.by = by
        self.since = since
        self.until = until
        self.reason = reason
    }

    /// "switched off by root at 2026-01-05T10:00:00Z: exam week" (the status reason).
    public func sentence(formatTime: (Date) -> String) -> String {
        "switched off by \(by.name) at \(formatTime(since))" + (reason.isEmpty ? "" : ": \(reason)")
            + (until.map { " (until \(formatTime($0)))" } ?? "")
    }
}

/// A capture node's access as it was before a `--hard` switch took it away.
public struct SavedNodeAccess: Sendable, Hashable {
    public var nodePath: String
    public var permission: Permission
    public var deviceID: String
    public var major: UInt32
    public var minor: UInt32
    public var mode: UInt32
    public var ownerUID: UInt32
    public var groupGID: UInt32
    public var aclText: String?
    public var saved: Date

    public init(nodePath: String, permission: Permission, deviceID: String, major: UInt32, minor: UInt32, mode: UInt32,
                ownerUID: UInt32, groupGID: UInt32, aclText: String?, saved: Date) {
        self.nodePath = nodePath
        self.permission = permission
        self.deviceID = deviceID
        self.major = major
        self.minor = minor
        self.mode = mode
        self.ownerUID = ownerUID
        self.groupGID = groupGID
        self.aclText = aclText
        self.saved = saved
    }

    var summary: String {
        let acl = aclText.map { $0.split(separator: "\n").joined(separator: ",") } ?? "no ACL"
        return "\(String(mode, radix: 8)) \(ownerUID):\(groupGID) \(acl)"
    }
}

extension Ledger {
    /// The switches that are off, by permission name.
    public func switches() throws(LedgerError) -> [PrivacySwitch] {
        try read { db throws(LedgerError) in try SwitchRow.query(db) }
    }

    /// Switches `state.permission` off (or changes how, when it is off already); audited as
    /// `switch_off`. Written before any node is edited: the engine's next pass applies it.
    public func recordSwitchOff(_ state: PrivacySwitch) throws(LedgerError) {
        let since = try Timestamp.microseconds(state.since)
        let until = try state.until.map { (date) throws(LedgerError) in try Timestamp.microseconds(date) }
        let reason = StoredText.capped(state.reason)
        try write { db, audit throws(LedgerError) in
            try db.prepare("""
                INSERT INTO switches (permission, hard, by_uid, by_name, since_usec, until_usec, reason)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (permission) DO UPDATE SET hard = excluded.hard, by_uid = excluded.by_uid,
                    by_name = excluded.by_name, since_usec = excluded.since_usec, until_usec = excluded.until_usec,
                    reason = excluded.reason
                """).run([.text(state.permission.rawValue), .integer(state.hard ? 1 : 0), .uid(state.by.uid),
                          .text(state.by.name), .integer(since), .optional(until), .text(reason)])
            var details = ["hard": state.hard ? "true" : "false", "reason": reason]
            if let until { details["until_usec"] = String(until) }
            try audit.append(AuditEvent(type: .switchOff, time: state.since, actor: state.by,
                                        permission: state.permission, details: details))
        }
    }

    /// Turns `permission` back on; audited as `switch_on` with `why` ("by root", "its time
    /// ran out"). False when it was on already (nothing is written then).
    @discardableResult
    public func recordSwitchOn(_ permission: Permission, by actor: Principal, why: String,
                               at now: Date = Date()) throws(LedgerError) -> Bool {
        try write { db, audit throws(LedgerError) in
            try db.prepare("DELETE FROM switches WHERE permission = ?").run([.text(permission.rawValue)])
            guard db.changes == 1 else { return false }
            try audit.append(AuditEvent(type: .switchOn, time: now, actor: actor, permission: permission,
                                        details: ["why": StoredText.capped(why)]))
            return true
        }
    }

    /// Nodes whose access a `--hard` switch saved and took away, not yet put back.
    public func savedNodeAccess() throws(LedgerError) -> [SavedNodeAccess] {
        try read { db throws(LedgerError) in try SavedNodeRow.query(db) }
    }

    /// Saves a node's access before it is taken away (intent first); audited as `switch_off`
    /// with the node. A node saved already keeps what was saved first.
    public func recordNodeAccessSaved(_ saved: SavedNodeAccess, by actor: Principal) throws(LedgerError) {
        let time = try Timestamp.microseconds(saved.saved)
        try write { db, audit throws(LedgerError) in
            try db.prepare("""
                INSERT INTO switch_saved_nodes (node_path, permission, device_id, major, minor, mode, owner_uid,
                    group_gid, acl_text, saved_usec)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node_path) DO NOTHING
                """).run([.text(saved.nodePath), .text(saved.permission.rawValue), .text(saved.deviceID),
                          .uid(saved.major), .uid(saved.minor), .uid(saved.mode), .uid(saved.ownerUID),
                          .uid(saved.groupGID), .optional(saved.aclText), .integer(time)])
            guard db.changes == 1 else { return }
            try audit.append(AuditEvent(type: .switchOff, time: saved.saved, actor: actor, permission: saved.permission,
                                        deviceID: saved.deviceID, nodePath: saved.nodePath,
                                        details: ["saved": saved.summary]))
        }
    }

    /// The saved access of `nodePath` was put back (or can no longer be: the node is gone or
    /// is another device now); audited as `switch_on` with the node and `outcome`.
    public func recordNodeAccessRestored(_ saved: SavedNodeAccess, outcome: String, by actor: Principal,
                                         at now: Date = Date()) throws(LedgerError) {
        try write { db, audit throws(LedgerError) in
            try db.prepare("DELETE FROM switch_saved_nodes WHERE node_path = ?").run([.text(saved.nodePath)])
            guard db.changes == 1 else { return }
            try audit.append(AuditEvent(type: .switchOn, time: now, actor: actor, permission: saved.permission,
                                        deviceID: saved.deviceID, nodePath: saved.nodePath,
                                        details: ["restored": saved.summary, "outcome": StoredText.capped(outcome)]))
        }
    }
}

enum SwitchRow {
    static func query(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> [PrivacySwitch] {
        let statement = try db.prepare("""
            SELECT permission, hard, by_uid, by_name, since_usec, until_usec, reason FROM switches ORDER BY permission
            """)
        var found: [PrivacySwitch] = []
        while try statement.step() {
            guard let permission = statement.text(0), let name = statement.text(3), let since = statement.int64(4),
                  let uid = statement.int64(2).flatMap(UInt32.init(exactly:)) else {
                throw .invalidRow(path: db.path, table: "switches", rowID: 0, problem: "a required column is NULL")
            }
            found.append(PrivacySwitch(permission: Permission(rawValue: permission), hard: statement.int64(1) == 1,
                                       by: Principal(uid: uid, name: name), since: Timestamp.date(since),
                                       until: statement.int64(5).map(Timestamp.date), reason: statement.text(6) ?? ""))
        }
        return found
    }
}

enum SavedNodeRow {
    static func query(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> [SavedNodeAccess] {
        let statement = try db.prepare("""
            SELECT node_path, permission, device_id, major, minor, mode, owner_uid, group_gid, acl_text, saved_usec
            FROM switch_saved_nodes ORDER BY node_path
            """)
        var found: [SavedNodeAccess] = []
        func number(_ column: Int32) -> UInt32? { statement.int64(column).flatMap(UInt32.init(exactly:)) }
        while try statement.step() {
            guard let path = statement.text(0), let permission = statement.text(1), let device = statement.text(2),
                  let major = number(3), let minor = number(4), let mode = number(5), let uid = number(6),
                  let gid = number(7), let saved = statement.int64(9) else {
                throw .invalidRow(path: db.path, table: "switch_saved_nodes", rowID: 0,
                                  problem: "a required column is NULL or out of range")
            }
            found.append(SavedNodeAccess(nodePath: path, permission: Permission(rawValue: permission), deviceID: device,
                                         major: major, minor: minor, mode: mode, ownerUID: uid, groupGID: gid,
                                         aclText: statement.text(8), saved: Timestamp.date(saved)))
        }
        return found
    }
}
