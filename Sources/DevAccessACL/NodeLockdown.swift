import Glibc
import CAcl
import CLinux
import DevAccessCore
import DevAccessSystem

/// A privacy switch's `--hard` edits of one capture node: what everyone but devaccess gives
/// (owner, group and other bits, named ACL entries: udev's group `video`, logind's uaccess,
/// an admin's `setfacl`) is read, taken away, and later put back exactly.
///
/// Every edit goes through the same verified `O_PATH` descriptor as `ACLWriter`'s (no
/// symlink followed, a character device with udev's major:minor), so a node replaced by
/// something else is never touched.
public enum NodeLockdown {
    /// The access of a node as it was before it was switched off: enough to put back
    /// `stat -c '%a %u %g'` and `getfacl` byte for byte.
    public struct SavedAccess: Sendable, Hashable {
        /// The permission bits (`0o7777`).
        public var mode: UInt32
        public var uid: UInt32
        public var gid: UInt32
        /// The access ACL in libacl's numeric long text form, or nil when the node had only
        /// the three base entries (the mode says all).
        public var aclText: String?

        public init(mode: UInt32, uid: UInt32, gid: UInt32, aclText: String?) {
            self.mode = mode
            self.uid = uid
            self.gid = gid
            self.aclText = aclText
        }

        /// One line for logs and audit details: `0660 0:44 user:1001:rw-,mask::rw-`.
        public var summary: String {
            let acl = aclText.map { $0.split(separator: "\n").joined(separator: ",") } ?? "no ACL"
            return "\(String(mode, radix: 8)) \(uid):\(gid) \(acl)"
        }
    }

    /// The node's access now.
    public static func read(path: String, major: UInt32, minor: UInt32) throws(ACLWriter.WriteError) -> SavedAccess {
        try ACLWriter.withVerifiedNode(path, major: major, minor: minor) { procPath throws(ACLWriter.WriteError) in
            try currentAccess(procPath, path: path)
        }
    }

    /// What a switched-off node keeps: its owner's bits when the owner is root (root opens it
    /// anyway), nothing for anyone else, and no ACL. (`strip` also gives a node another user
    /// owns to root: an owner may chmod and setfacl their own node back open.)
    public static func lockedMode(_ mode: UInt32, owner: UInt32) -> UInt32 {
        owner == 0 ? mode & 0o7700 : mode & 0o7000
    }

    /// Whether facts describe a node nobody but root can open (as `strip` leaves it).
    public static func isLocked(_ facts: NodeFacts) -> Bool {
        facts.ownerUID == 0 && facts.acl == nil && facts.mode & 0o7777 == lockedMode(facts.mode, owner: 0)
    }

    /// Takes every user's and group's access away (see `lockedMode`). Returns whether it
    /// changed anything.
    @discardableResult
    public static func strip(path: String, major: UInt32, minor: UInt32) throws(ACLWriter.WriteError) -> Bool {
        try ACLWriter.withVerifiedNode(path, major: major, minor: minor) { procPath throws(ACLWriter.WriteError) in
            let now = try currentAccess(procPath, path: path)
            let locked = lockedMode(now.mode, owner: now.uid)
            guard now.uid != 0 || now.aclText != nil || now.mode != locked else { return false }
            if now.uid != 0 {
                // Root's, group kept: `restore` gives it back. Through /proc/self/fd/N, so
                // exactly the verified inode.
                guard chown(procPath, 0, UInt32.max /* (gid_t)-1: unchanged */) == 0 else {
                    throw .failed(path, operation: "changing the owner of", .current)
                }
            }
            try setACL(fromMode: locked, procPath, path: path)
            return true
        }
    }

    /// Puts `saved` back: owner and group, then the mode, then the ACL (which also sets the
    /// permission bits it covers).
    public static func restore(_ saved: SavedAccess, path: String, major: UInt32, minor: UInt32)
        throws(ACLWriter.WriteError)
    {
        try ACLWriter.withVerifiedNode(path, major: major, minor: minor) { procPath throws(ACLWriter.WriteError) in
            let now = try currentAccess(procPath, path: path)
            if now.uid != saved.uid || now.gid != saved.gid {
                // Through /proc/self/fd/N: chown follows that link to exactly the verified inode.
                guard chown(procPath, saved.uid, saved.gid) == 0 else {
                    throw .failed(path, operation: "changing the owner of", .current)
                }
            }
            guard chmod(procPath, mode_t(saved.mode & 0o7777)) == 0 else {
                throw .failed(path, operation: "changing the mode of", .current)
            }
            guard let text = saved.aclText else {
                try setACL(fromMode: saved.mode, procPath, path: path)
                return
            }
            guard let acl = acl_from_text(text) else {
                throw .failed(path, operation: "reading the saved ACL text for", .current)
            }
            defer { acl_free(UnsafeMutableRawPointer(acl)) }
            guard acl_valid(acl) == 0 else { throw .failed(path, operation: "validating the saved ACL of", .current) }
            guard acl_set_file(procPath, acl_type_t(ACL_TYPE_ACCESS), acl) == 0 else {
                throw .failed(path, operation: "writing the ACL of", .current)
            }
        }
    }

    private static func currentAccess(_ procPath: String, path: String) throws(ACLWriter.WriteError) -> SavedAccess {
        var info = stat()
        guard stat(procPath, &info) == 0 else { throw .failed(path, operation: "stat", .current) }
        guard let acl = acl_get_file(procPath, acl_type_t(ACL_TYPE_ACCESS)) else {
            throw .failed(path, operation: "reading the ACL of", .current)
        }
        defer { acl_free(UnsafeMutableRawPointer(acl)) }
        var text: String?
        // acl_equiv_mode is 0 for a minimal ACL: the mode bits say everything.
        if acl_equiv_mode(acl, nil) != 0 {
            guard let raw = acl_to_any_text(acl, nil, 0x0A /* '\n' */, Int32(TEXT_NUMERIC_IDS)) else {
                throw .failed(path, operation: "writing out the ACL of", .current)
            }
            defer { acl_free(UnsafeMutableRawPointer(raw)) }
            text = String(cString: raw)
        }
        return SavedAccess(mode: UInt32(info.st_mode) & 0o7777, uid: info.st_uid, gid: info.st_gid, aclText: text)
    }

    /// Replaces the access ACL with the three base entries of `mode` (drops the xattr).
    private static func setACL(fromMode mode: UInt32, _ procPath: String, path: String) throws(ACLWriter.WriteError) {
        guard let acl = acl_from_mode(mode_t(mode & 0o777)) else {
            throw .failed(path, operation: "building an ACL for", .current)
        }
        defer { acl_free(UnsafeMutableRawPointer(acl)) }
        guard acl_set_file(procPath, acl_type_t(ACL_TYPE_ACCESS), acl) == 0 else {
            throw .failed(path, operation: "writing the ACL of", .current)
        }
    }
}
