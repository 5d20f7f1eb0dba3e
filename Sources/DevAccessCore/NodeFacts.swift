/// What the kernel knows about one device node: type, numbers, owner, mode and
/// access ACL. Gathered by `DevAccessSystem`; evaluated here without I/O.
public struct NodeFacts: Sendable, Hashable {
    public enum FileKind: String, Sendable, Hashable, Codable {
        case characterDevice, blockDevice, regular, directory, symlink, other
    }

    public var path: String
    public var kind: FileKind
    /// Device number for character and block devices.
    public var major: UInt32
    public var minor: UInt32
    public var ownerUID: UInt32
    public var ownerName: String?
    public var groupGID: UInt32
    public var groupName: String?
    /// The permission bits (`0o7777` part of `st_mode`).
    public var mode: UInt32
    /// The extended access ACL, or nil when the node has only the three base entries.
    /// When present it holds every entry, base ones included, as `getfacl` shows them.
    public var acl: [ACLEntry]?

    public init(path: String, kind: FileKind, major: UInt32 = 0, minor: UInt32 = 0,
                ownerUID: UInt32, ownerName: String? = nil, groupGID: UInt32, groupName: String? = nil,
                mode: UInt32, acl: [ACLEntry]? = nil) {
        self.path = path
        self.kind = kind
        self.major = major
        self.minor = minor
        self.ownerUID = ownerUID
        self.ownerName = ownerName
        self.groupGID = groupGID
        self.groupName = groupName
        self.mode = mode
        self.acl = acl
    }

    /// `0660`-style octal text of the permission bits.
    public var modeOctal: String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

/// One POSIX ACL entry (`user:alice:rw-`).
public struct ACLEntry: Sendable, Hashable {
    public enum Tag: Sendable, Hashable {
        case userObject
        case user(UInt32)
        case groupObject
        case group(UInt32)
        case mask
        case other
    }

    public var tag: Tag
    public var permissions: AccessMode
    /// The user or group name for named entries, when it resolves.
    public var qualifierName: String?

    public init(tag: Tag, permissions: AccessMode, qualifierName: String? = nil) {
        self.tag = tag
        self.permissions = permissions
        self.qualifierName = qualifierName
    }

    /// `getfacl`'s short text form: `user::rw-`, `user:alice:rw-`, `mask::r--`.
    public var text: String {
        let perms = permissions.symbolic
        switch tag {
        case .userObject: return "user::\(perms)"
        case .user(let uid): return "user:\(qualifierName ?? String(uid)):\(perms)"
        case .groupObject: return "group::\(perms)"
        case .group(let gid): return "group:\(qualifierName ?? String(gid)):\(perms)"
        case .mask: return "mask::\(perms)"
        case .other: return "other::\(perms)"
        }
    }
}
