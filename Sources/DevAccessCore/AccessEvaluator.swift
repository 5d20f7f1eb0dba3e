/// Answers "can this user open this node for reading / writing?" from the node's
/// owner, mode and ACL and the user's groups, in the order the kernel checks them
/// (`generic_permission` -> `acl_permission_check` -> `posix_acl_permission`).
///
/// The kernel checks the requested mask as a whole: a group-class entry grants
/// `O_RDWR` only if one matching entry holds both bits. So read, write and
/// read-write are evaluated separately, not combined from parts.
public enum AccessEvaluator {
    /// What one user can do with one node, and the rule that decided it.
    public struct Result: Sendable, Hashable {
        public var access: AccessMode
        public var decidedBy: Source
        /// Bits an entry held that the ACL mask took away (for the reasons text).
        public var maskedOut: AccessMode
        /// The modes an `open()` asking for that mode alone gets: `access`'s bits, and more
        /// when read-only and write-only opens each pass through different group-class
        /// entries while a read-write open, which needs one entry holding both, is refused.
        public var separately: AccessMode

        public init(access: AccessMode, decidedBy: Source, maskedOut: AccessMode = .none,
                    separately: AccessMode? = nil) {
            self.access = access
            self.decidedBy = decidedBy
            self.maskedOut = maskedOut
            self.separately = separately ?? access.subtracting(.execute)
        }

        /// Read-only and write-only opens both pass, a read-write open does not.
        public var readWriteOnlySeparately: Bool {
            separately == .readWrite && access != .readWrite
        }
    }

    /// The class of the mode or ACL that applied.
    public enum Source: Sendable, Hashable {
        /// uid 0: CAP_DAC_OVERRIDE lets root read and write any device node.
        case superuser
        case owner
        case namedUser(uid: UInt32)
        /// The user is in the owning group or a named group; the groups listed matched.
        case groupClass(matching: [UInt32])
        case other
    }

    public static func evaluate(_ node: NodeFacts, for user: UserIdentity) -> Result {
        if user.uid == 0 {
            return Result(access: .readWrite, decidedBy: .superuser)
        }
        let readWrite = check(node, user, want: .readWrite)
        if readWrite.granted {
            return Result(access: .readWrite, decidedBy: readWrite.source, maskedOut: readWrite.maskedOut)
        }
        let read = check(node, user, want: .read)
        let write = check(node, user, want: .write)
        if read.granted {
            return Result(access: .read, decidedBy: read.source, maskedOut: read.maskedOut,
                          separately: write.granted ? .readWrite : .read)
        }
        if write.granted {
            return Result(access: .write, decidedBy: write.source, maskedOut: write.maskedOut)
        }
        return Result(access: .none, decidedBy: readWrite.source, maskedOut: readWrite.maskedOut)
    }

    /// The rule that decides an `open()` asking for exactly `want` (for the reasons text).
    public static func source(of want: AccessMode, on node: NodeFacts, for user: UserIdentity) -> Source {
        user.uid == 0 ? .superuser : check(node, user, want: want).source
    }

    /// Whether an `open()` asking for exactly `want` would pass the permission check.
    public static func permits(_ want: AccessMode, on node: NodeFacts, for user: UserIdentity) -> Bool {
        user.uid == 0 || check(node, user, want: want).granted
    }

    private struct Check {
        var granted: Bool
        var source: Source
        var maskedOut: AccessMode = .none
    }

    /// `acl_permission_check` consults the ACL only when the group bits of the mode (which
    /// show the ACL mask) are not all clear; with mask `---` the mode bits decide.
    private static func check(_ node: NodeFacts, _ user: UserIdentity, want: AccessMode) -> Check {
        guard let acl = node.acl, node.mode & 0o070 != 0 else {
            return checkMode(node, user, want: want)
        }
        return checkACL(acl, node, user, want: want)
    }

    /// No extended ACL: the first class that matches decides; there is no fall-through.
    private static func checkMode(_ node: NodeFacts, _ user: UserIdentity, want: AccessMode) -> Check {
        if user.uid == node.ownerUID {
            return Check(granted: AccessMode(bits: node.mode >> 6).isSuperset(of: want), source: .owner)
        }
        if user.isMember(of: node.groupGID) {
            return Check(granted: AccessMode(bits: node.mode >> 3).isSuperset(of: want),
                         source: .groupClass(matching: [node.groupGID]))
        }
        return Check(granted: AccessMode(bits: node.mode).isSuperset(of: want), source: .other)
    }

    /// `posix_acl_permission`: owner entry unmasked; named user masked; any matching
    /// group entry that grants everything wanted (masked) wins, a matching group
    /// class that does not grant denies; only a user in no group class reaches other.
    private static func checkACL(_ acl: [ACLEntry], _ node: NodeFacts, _ user: UserIdentity,
                                 want: AccessMode) -> Check {
        let mask = acl.first { $0.tag == .mask }?.permissions
        func masked(_ perms: AccessMode) -> AccessMode { mask.map { perms.intersection($0) } ?? perms }

        if user.uid == node.ownerUID, let entry = acl.first(where: { $0.tag == .userObject }) {
            return Check(granted: entry.permissions.isSuperset(of: want), source: .owner)
        }
        for entry in acl {
            if case .user(let uid) = entry.tag, uid == user.uid {
                let effective = masked(entry.permissions)
                return Check(granted: effective.isSuperset(of: want), source: .namedUser(uid: uid),
                             maskedOut: entry.permissions.subtracting(effective))
            }
        }
        var matching: [UInt32] = []
        var maskedOut: AccessMode = .none
        for entry in acl {
            let gid: UInt32
            switch entry.tag {
            case .groupObject: gid = node.groupGID
            case .group(let named): gid = named
            default: continue
            }
            guard user.isMember(of: gid) else { continue }
            matching.append(gid)
            let effective = masked(entry.permissions)
            maskedOut.formUnion(entry.permissions.subtracting(effective))
            if effective.isSuperset(of: want) {
                return Check(granted: true, source: .groupClass(matching: [gid]))
            }
        }
        if !matching.isEmpty {
            return Check(granted: false, source: .groupClass(matching: matching), maskedOut: maskedOut)
        }
        let other = acl.first { $0.tag == .other }?.permissions ?? AccessMode(bits: node.mode)
        return Check(granted: other.isSuperset(of: want), source: .other)
    }
}
