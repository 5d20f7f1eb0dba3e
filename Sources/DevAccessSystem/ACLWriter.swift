import Glibc
import CAcl
import CLinux
import DevAccessCore

/// libacl, write side: adds or removes one named user or group entry in a device node's
/// access ACL, the way devaccess turns a decision into kernel state.
///
/// Every call first proves what it is about to edit: the path is opened `O_PATH|O_NOFOLLOW`,
/// the descriptor is `fstat`ed, and only a character device with exactly the expected
/// major:minor is touched, through `/proc/self/fd/N`, so the inode checked is the inode
/// edited (no symlink, no swapped-in file, no race between check and edit).
/// Only the one entry and the mask change; the mask is recalculated afterwards (as
/// systemd's devnode-acl does) so the entry takes effect.
public enum ACLWriter {
    /// Whose entry.
    public enum Qualifier: Sendable, Hashable, CustomStringConvertible {
        case user(UInt32)
        case group(UInt32)

        public var description: String {
            switch self {
            case .user(let uid): return "user:\(uid)"
            case .group(let gid): return "group:\(gid)"
            }
        }

        var tag: acl_tag_t {
            switch self {
            case .user: return acl_tag_t(ACL_USER)
            case .group: return acl_tag_t(ACL_GROUP)
            }
        }

        var id: UInt32 {
            switch self {
            case .user(let uid): return uid
            case .group(let gid): return gid
            }
        }
    }

    public enum WriteError: Error, Equatable, CustomStringConvertible {
        case vanished(String)
        /// Something other than a character device is at the path (symlink, file, directory).
        case notCharacterDevice(String, found: NodeFacts.FileKind)
        /// A character device, but not the one expected: refused, it may have been planted.
        case wrongDevice(String, expectedMajor: UInt32, expectedMinor: UInt32, foundMajor: UInt32, foundMinor: UInt32)
        case failed(String, operation: String, Errno)

        public var description: String {
            switch self {
            case .vanished(let path):
                return "\(path) no longer exists (the device went away); nothing was changed"
            case .notCharacterDevice(let path, let kind):
                return "\(path) is a \(kind.rawValue), not a character device; refusing to change its ACL"
                    + " (check what created it)"
            case .wrongDevice(let path, let expectedMajor, let expectedMinor, let foundMajor, let foundMinor):
                return "\(path) is device \(foundMajor):\(foundMinor), expected \(expectedMajor):\(expectedMinor);"
                    + " refusing to change its ACL (the node was replaced, or udev data is stale)"
            case .failed(let path, let operation, let errno):
                return "\(operation) \(path) failed: \(errno)"
            }
        }
    }

    /// Ensures `uid` has at least `permissions` on the node. Returns whether the ACL changed
    /// (false when an equal or wider entry was already there and effective).
    @discardableResult
    public static func addUserEntry(path: String, expectedMajor: UInt32, expectedMinor: UInt32, uid: UInt32,
                                    permissions: AccessMode = .readWrite) throws(WriteError) -> Bool {
        try addEntry(.user(uid), path: path, expectedMajor: expectedMajor, expectedMinor: expectedMinor,
                     permissions: permissions)
    }

    /// Removes the named entry of `uid`. Returns whether there was one.
    @discardableResult
    public static func removeUserEntry(path: String, expectedMajor: UInt32, expectedMinor: UInt32, uid: UInt32)
        throws(WriteError) -> Bool
    {
        try removeEntry(.user(uid), path: path, expectedMajor: expectedMajor, expectedMinor: expectedMinor)
    }

    @discardableResult
    public static func addGroupEntry(path: String, expectedMajor: UInt32, expectedMinor: UInt32, gid: UInt32,
                                     permissions: AccessMode = .readWrite) throws(WriteError) -> Bool {
        try addEntry(.group(gid), path: path, expectedMajor: expectedMajor, expectedMinor: expectedMinor,
                     permissions: permissions)
    }

    @discardableResult
    public static func removeGroupEntry(path: String, expectedMajor: UInt32, expectedMinor: UInt32, gid: UInt32)
        throws(WriteError) -> Bool
    {
        try removeEntry(.group(gid), path: path, expectedMajor: expectedMajor, expectedMinor: expectedMinor)
    }

    @discardableResult
    public static func addEntry(_ qualifier: Qualifier, path: String, expectedMajor: UInt32, expectedMinor: UInt32,
                                permissions: AccessMode) throws(WriteError) -> Bool {
        try withVerifiedNode(path, major: expectedMajor, minor: expectedMinor) { procPath throws(WriteError) in
            try editACL(procPath, path: path) { acl throws(Errno) in
                try ACLEdit.add(qualifier, permissions: permissions, to: &acl)
            }
        }
    }

    @discardableResult
    public static func removeEntry(_ qualifier: Qualifier, path: String, expectedMajor: UInt32, expectedMinor: UInt32)
        throws(WriteError) -> Bool
    {
        try withVerifiedNode(path, major: expectedMajor, minor: expectedMinor) { procPath throws(WriteError) in
            try editACL(procPath, path: path) { acl throws(Errno) in
                try ACLEdit.remove(qualifier, from: &acl)
            }
        }
    }

    // MARK: - Steps

    /// Opens the path without following it, proves it is the expected character device,
    /// and hands `body` a path that names exactly that inode.
    private static func withVerifiedNode<R>(_ path: String, major: UInt32, minor: UInt32,
                                            _ body: (String) throws(WriteError) -> R) throws(WriteError) -> R {
        let fd: FileDescriptor
        switch Result(catching: { () throws(Errno) in try FileDescriptor.openPath(path) }) {
        case .success(let opened): fd = opened
        case .failure(.noSuchFile): throw .vanished(path)
        case .failure(let error): throw .failed(path, operation: "open", error)
        }
        var info = stat()
        guard fstat(fd.rawValue, &info) == 0 else { throw .failed(path, operation: "fstat", .current) }
        let kind = NodeInspector.fileKind(info.st_mode)
        guard kind == .characterDevice else { throw .notCharacterDevice(path, found: kind) }
        let foundMajor = devaccess_major(info.st_rdev), foundMinor = devaccess_minor(info.st_rdev)
        guard foundMajor == major, foundMinor == minor else {
            throw .wrongDevice(path, expectedMajor: major, expectedMinor: minor,
                               foundMajor: foundMajor, foundMinor: foundMinor)
        }
        return try body(fd.procPath)
    }

    /// Reads the access ACL, lets `change` edit it, and writes it back only if it changed.
    private static func editACL(_ procPath: String, path: String, _ change: (inout acl_t) throws(Errno) -> Bool)
        throws(WriteError) -> Bool
    {
        guard var acl = acl_get_file(procPath, acl_type_t(ACL_TYPE_ACCESS)) else {
            throw .failed(path, operation: "reading the ACL of", .current)
        }
        // `change` may reallocate the ACL (acl_create_entry), so free whatever it ends as.
        defer { acl_free(UnsafeMutableRawPointer(acl)) }
        let changed: Bool
        do {
            changed = try change(&acl)
        } catch {
            throw .failed(path, operation: "editing the ACL of", error)
        }
        guard changed else { return false }
        guard acl_valid(acl) == 0 else { throw .failed(path, operation: "validating the new ACL of", .current) }
        guard acl_set_file(procPath, acl_type_t(ACL_TYPE_ACCESS), acl) == 0 else {
            throw .failed(path, operation: "writing the ACL of", .current)
        }
        return true
    }
}

/// In-memory edits of one libacl ACL. Each returns whether anything changed.
enum ACLEdit {
    static func add(_ qualifier: ACLWriter.Qualifier, permissions: AccessMode, to acl: inout acl_t) throws(Errno) -> Bool {
        if let existing = try findEntry(acl, tag: qualifier.tag, id: qualifier.id) {
            let current = try entryPermissions(existing)
            let effective = try maskPermissions(acl).map { current.intersection($0) } ?? current
            if effective.isSuperset(of: permissions) { return false }
            // Widen only: rights someone else gave this entry stay.
            try setPermissions(existing, current.union(permissions))
        } else {
            var optionalACL: acl_t? = acl
            var entry: acl_entry_t?
            let rc = acl_create_entry(&optionalACL, &entry)
            if let reallocated = optionalACL { acl = reallocated }
            guard rc == 0, let created = entry else { throw .current }
            guard acl_set_tag_type(created, qualifier.tag) == 0 else { throw .current }
            var id = qualifier.id
            guard acl_set_qualifier(created, &id) == 0 else { throw .current }
            try setPermissions(created, permissions)
        }
        try recalculateMask(&acl)
        return true
    }

    static func remove(_ qualifier: ACLWriter.Qualifier, from acl: inout acl_t) throws(Errno) -> Bool {
        guard let existing = try findEntry(acl, tag: qualifier.tag, id: qualifier.id) else { return false }
        guard acl_delete_entry(acl, existing) == 0 else { throw .current }
        try recalculateMask(&acl)
        // With no named entries left, the recalculated mask equals the owning group's
        // rights: dropping it leaves the same access and a plain mode-only node.
        if try !hasNamedEntries(acl), let mask = try firstEntry(acl, where: { tag throws(Errno) in tag == acl_tag_t(ACL_MASK) }) {
            guard acl_delete_entry(acl, mask) == 0 else { throw .current }
        }
        return true
    }

    private static func recalculateMask(_ acl: inout acl_t) throws(Errno) {
        var optionalACL: acl_t? = acl
        let rc = acl_calc_mask(&optionalACL)
        if let updated = optionalACL { acl = updated }
        guard rc == 0 else { throw .current }
    }

    static func findEntry(_ acl: acl_t, tag: acl_tag_t, id: UInt32) throws(Errno) -> acl_entry_t? {
        try firstEntry(acl) { (entryTag, entry) throws(Errno) in
            guard entryTag == tag else { return false }
            guard let qualifier = acl_get_qualifier(entry) else { throw .current }
            defer { acl_free(qualifier) }
            return qualifier.load(as: UInt32.self) == id
        }
    }

    private static func hasNamedEntries(_ acl: acl_t) throws(Errno) -> Bool {
        try firstEntry(acl) { tag throws(Errno) in tag == acl_tag_t(ACL_USER) || tag == acl_tag_t(ACL_GROUP) } != nil
    }

    private static func firstEntry(_ acl: acl_t, where matches: (acl_tag_t) throws(Errno) -> Bool)
        throws(Errno) -> acl_entry_t?
    {
        try firstEntry(acl) { (tag, _) throws(Errno) in try matches(tag) }
    }

    /// Walks the entries in order and returns the first that `matches`.
    private static func firstEntry(_ acl: acl_t, _ matches: (acl_tag_t, acl_entry_t) throws(Errno) -> Bool)
        throws(Errno) -> acl_entry_t?
    {
        var entry: acl_entry_t?
        var which = ACL_FIRST_ENTRY
        while true {
            let rc = acl_get_entry(acl, which, &entry)
            if rc == 0 { return nil }
            guard rc == 1, let current = entry else { throw .current }
            which = ACL_NEXT_ENTRY
            var tag = acl_tag_t()
            guard acl_get_tag_type(current, &tag) == 0 else { throw .current }
            if try matches(tag, current) { return current }
        }
    }

    /// The mask's rights, or nil when the ACL has no mask.
    private static func maskPermissions(_ acl: acl_t) throws(Errno) -> AccessMode? {
        guard let mask = try firstEntry(acl, where: { tag throws(Errno) in tag == acl_tag_t(ACL_MASK) }) else { return nil }
        return try entryPermissions(mask)
    }

    private static let bits: [(AccessMode, acl_perm_t)] = [
        (.read, acl_perm_t(ACL_READ)), (.write, acl_perm_t(ACL_WRITE)), (.execute, acl_perm_t(ACL_EXECUTE)),
    ]

    static func entryPermissions(_ entry: acl_entry_t) throws(Errno) -> AccessMode {
        var permset: acl_permset_t?
        guard acl_get_permset(entry, &permset) == 0, let set = permset else { throw .current }
        var mode = AccessMode.none
        for (flag, perm) in bits where acl_get_perm(set, perm) == 1 { mode.insert(flag) }
        return mode
    }

    private static func setPermissions(_ entry: acl_entry_t, _ mode: AccessMode) throws(Errno) {
        var permset: acl_permset_t?
        guard acl_get_permset(entry, &permset) == 0, let set = permset else { throw .current }
        guard acl_clear_perms(set) == 0 else { throw .current }
        for (flag, perm) in bits where mode.contains(flag) {
            guard acl_add_perm(set, perm) == 0 else { throw .current }
        }
        guard acl_set_permset(entry, set) == 0 else { throw .current }
    }
}
