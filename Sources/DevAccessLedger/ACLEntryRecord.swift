import FoundationEssentials
import Glibc
import DevAccessCore

/// An ACL entry devaccess put on a device node, remembered so that revoke, expiry and
/// reconcile remove exactly what devaccess added and nothing an admin set by hand.
public struct ACLEntryRecord: Sendable, Hashable, Identifiable {
    public enum Qualifier: Sendable, Hashable {
        case user(UInt32)
        case group(UInt32)
    }

    public var id: Int64
    public var nodePath: String
    /// The stable id of the device the node belongs to (udev ID_PATH, ALSA card id...).
    public var deviceID: String
    public var major: UInt32
    public var minor: UInt32
    public var qualifier: Qualifier
    public var permissions: AccessMode
    /// The grant it enforces; nil for entries of `devaccess run` groups or after a reset.
    public var grantID: Int64?
    public var created: Date

    public init(id: Int64, nodePath: String, deviceID: String, major: UInt32, minor: UInt32, qualifier: Qualifier,
                permissions: AccessMode, grantID: Int64? = nil, created: Date) {
        self.id = id
        self.nodePath = nodePath
        self.deviceID = deviceID
        self.major = major
        self.minor = minor
        self.qualifier = qualifier
        self.permissions = permissions
        self.grantID = grantID
        self.created = created
    }
}

/// An entry to record as added.
public struct NewACLEntry: Sendable, Hashable {
    public var nodePath: String
    public var deviceID: String
    public var major: UInt32
    public var minor: UInt32
    public var qualifier: ACLEntryRecord.Qualifier
    public var permissions: AccessMode
    public var grantID: Int64?

    public init(nodePath: String, deviceID: String, major: UInt32, minor: UInt32,
                qualifier: ACLEntryRecord.Qualifier, permissions: AccessMode = .readWrite, grantID: Int64? = nil) {
        self.nodePath = nodePath
        self.deviceID = deviceID
        self.major = major
        self.minor = minor
        self.qualifier = qualifier
        self.permissions = permissions
        self.grantID = grantID
    }
}

enum ACLEntryRow {
    static let columns = "id, node_path, device_id, major, minor, uid, gid, permissions, grant_id, created_usec"

    static func read(_ row: borrowing SQLiteStatement, path: String) throws(LedgerError) -> ACLEntryRecord {
        let id = row.int64(0) ?? -1
        func bad(_ problem: String) -> LedgerError {
            .invalidRow(path: path, table: "acl_entries", rowID: id, problem: problem)
        }
        guard let node = row.text(1), let device = row.text(2) else { throw bad("node_path or device_id is NULL") }
        guard let major = row.int64(3).flatMap(UInt32.init(exactly:)),
              let minor = row.int64(4).flatMap(UInt32.init(exactly:)) else { throw bad("major:minor out of range") }
        let qualifier: ACLEntryRecord.Qualifier
        if let uid = row.int64(5).flatMap(UInt32.init(exactly:)) {
            qualifier = .user(uid)
        } else if let gid = row.int64(6).flatMap(UInt32.init(exactly:)) {
            qualifier = .group(gid)
        } else {
            throw bad("neither uid nor gid is a valid id")
        }
        guard let permissions = row.text(7).flatMap(parse) else { throw bad("permissions is not like 'rw-'") }
        guard let created = row.int64(9) else { throw bad("created_usec is NULL") }
        return ACLEntryRecord(id: id, nodePath: node, deviceID: device, major: major, minor: minor, qualifier: qualifier,
                              permissions: permissions, grantID: row.int64(8), created: Timestamp.date(created))
    }

    /// `rw-` (as `AccessMode.symbolic` writes it) back to a mode.
    static func parse(_ text: String) -> AccessMode? {
        let chars = Array(text)
        let positions: [(letter: Character, flag: AccessMode)] = [("r", .read), ("w", .write), ("x", .execute)]
        guard chars.count == positions.count else { return nil }
        var mode = AccessMode.none
        for (char, position) in zip(chars, positions) {
            if char == position.letter { mode.insert(position.flag) } else if char != "-" { return nil }
        }
        return mode
    }

    static func qualifierValues(_ qualifier: ACLEntryRecord.Qualifier) -> (uid: SQLValue, gid: SQLValue) {
        switch qualifier {
        case .user(let uid): return (.uid(uid), .null)
        case .group(let gid): return (.null, .uid(gid))
        }
    }

    static func qualifierClause(_ qualifier: ACLEntryRecord.Qualifier) -> (String, SQLValue) {
        switch qualifier {
        case .user(let uid): return ("uid = ?", .uid(uid))
        case .group(let gid): return ("gid = ?", .uid(gid))
        }
    }
}
