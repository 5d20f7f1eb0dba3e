import Glibc
import CAcl
import CLinux
import DevAccessCore
import DevAccessSystem

/// libacl, write side: adds or removes one named user or group entry in a device node's
/// access ACL, the way devaccess turns a decision into kernel state.
///
/// Every call first proves what it is about to edit: the path is opened `O_PATH|O_NOFOLLOW`,
/// the descriptor is `fstat`ed, and only a character device with exactly the expected
/// major:minor is touched, through `/proc/self/fd/N`, so the inode checked is the inode
/// edited (no symlink, no swapped-in file, no race between check and edit). The ACL is
/// read and written through that same descriptor.
///
/// No edit changes what anyone else can effectively do with the node. The mask limits every
/// group-class entry (owning group, named users, named groups), and an admin may have
/// narrowed it on purpose (`setfacl -m m::r`, `chmod g-w`). So the mask only grows when the
/// entry being added needs it to, and then every other group-class entry is first clamped to
/// what the old mask let it do (its rights ∧ old mask): its effective rights stay exactly as
/// they were. Removing an entry clamps the same way before the mask is recalculated, and the
/// mask is dropped only when no named entry is left, where it then equals the (clamped)
/// owning group's rights: the node is mode-only again with the same access for everyone.
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

    /// What a create-only add found.
    public enum CreateOutcome: Sendable, Hashable {
        /// There was no entry for the qualifier; one with exactly the asked rights was added.
        case created
        /// An entry for the qualifier was already there (someone else's, as far as the
        /// caller knows): it was left exactly as it was, and nothing else changed either.
        case alreadyPresent(permissions: AccessMode, effective: AccessMode)
    }

    /// Adds `user:<uid>:<permissions>` only if the node has no entry for `uid` at all, as
    /// read through the same verified descriptor the edit goes through. An existing entry
    /// is never widened, narrowed or taken over: the caller learns it was there.
    public static func createUserEntry(path: String, expectedMajor: UInt32, expectedMinor: UInt32, uid: UInt32,
                                       permissions: AccessMode = .readWrite) throws(WriteError) -> CreateOutcome {
        try createEntry(.user(uid), path: path, expectedMajor: expectedMajor, expectedMinor: expectedMinor,
                        permissions: permissions)
    }

    public static func createEntry(_ qualifier: Qualifier, path: String, expectedMajor: UInt32, expectedMinor: UInt32,
                                   permissions: AccessMode) throws(WriteError) -> CreateOutcome {
        try withVerifiedNode(path, major: expectedMajor, minor: expectedMinor) { procPath throws(WriteError) in
            try editACL(procPath, path: path) { acl throws(Errno) in
                let outcome = try ACLEdit.create(qualifier, permissions: permissions, in: &acl)
                return (outcome == .created, outcome)
            }
        }
    }

    /// Ensures `uid` has at least `permissions` on the node, widening an existing entry for
    /// `uid` if need be: only for an entry the caller knows is its own (use
    /// `createUserEntry` otherwise). Returns whether the ACL changed (false when an equal
    /// or wider entry was already there and effective).
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
                let changed = try ACLEdit.add(qualifier, permissions: permissions, to: &acl)
                return (changed, changed)
            }
        }
    }

    @discardableResult
    public static func removeEntry(_ qualifier: Qualifier, path: String, expectedMajor: UInt32, expectedMinor: UInt32)
        throws(WriteError) -> Bool
    {
        try withVerifiedNode(path, major: expectedMajor, minor: expectedMinor) { procPath throws(WriteError) in
            try editACL(procPath, path: path) { acl throws(Errno) in
                let changed = try ACLEdit.remove(qualifier, from: &acl)
                return (changed, changed)
            }
        }
    }

    // MARK: - Steps

    /// Opens the path without following it, proves it is the expected character device,
    /// and hands `body` a path that names exactly that inode.
    static func withVerifiedNode<R>(_ path: String, major: UInt32, minor: UInt32,
                                            _ body: (String) throws(WriteError) -> R) throws(WriteError) -> R {
        let fd: FileDescriptor
        switch Result(catching: { () throws(SystemCallError) in try FileDescriptor.openPath(path) }) {
        case .success(let opened): fd = opened
        case .failure(let error) where error.isNotFound: throw .vanished(path)
        case .failure(let error): throw .failed(path, operation: "open", error.errno)
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

    /// Reads the access ACL, lets `change` edit it, and writes it back only if `change`
    /// says it changed; returns what `change` found.
    private static func editACL<R>(_ procPath: String, path: String,
                                   _ change: (inout acl_t) throws(Errno) -> (changed: Bool, result: R))
        throws(WriteError) -> R
    {
        guard var acl = acl_get_file(procPath, acl_type_t(ACL_TYPE_ACCESS)) else {
            throw .failed(path, operation: "reading the ACL of", .current)
        }
        // `change` may reallocate the ACL (acl_create_entry), so free whatever it ends as.
        defer { acl_free(UnsafeMutableRawPointer(acl)) }
        let edit: (changed: Bool, result: R)
        do {
            edit = try change(&acl)
        } catch {
            throw .failed(path, operation: "editing the ACL of", error)
        }
        guard edit.changed else { return edit.result }
        guard acl_valid(acl) == 0 else { throw .failed(path, operation: "validating the new ACL of", .current) }
        guard acl_set_file(procPath, acl_type_t(ACL_TYPE_ACCESS), acl) == 0 else {
            throw .failed(path, operation: "writing the ACL of", .current)
        }
        return edit.result
    }
}

/// In-memory edits of one libacl ACL. None changes another entry's effective rights.
enum ACLEdit {
    /// Adds an entry for `qualifier` with `permissions` unless one exists; an existing
    /// entry is reported, never touched.
    static func create(_ qualifier: ACLWriter.Qualifier, permissions: AccessMode, in acl: inout acl_t)
        throws(Errno) -> ACLWriter.CreateOutcome
    {
        if let existing = try findEntry(acl, tag: qualifier.tag, id: qualifier.id) {
            let current = try ACLEntries.permissions(existing)
            let effective = try maskPermissions(acl).map { current.intersection($0) } ?? current
            return .alreadyPresent(permissions: current, effective: effective)
        }
        let created = try newEntry(qualifier, in: &acl)
        try makeEffective(created, qualifier, keeping: .none, adding: permissions, in: &acl)
        return .created
    }

    /// Ensures the entry for `qualifier` effectively grants at least `permissions`, adding
    /// or widening it. Returns whether anything changed.
    static func add(_ qualifier: ACLWriter.Qualifier, permissions: AccessMode, to acl: inout acl_t) throws(Errno) -> Bool {
        if let existing = try findEntry(acl, tag: qualifier.tag, id: qualifier.id) {
            let current = try ACLEntries.permissions(existing)
            let effective = try maskPermissions(acl).map { current.intersection($0) } ?? current
            if effective.isSuperset(of: permissions) { return false }
            try makeEffective(existing, qualifier, keeping: current, adding: permissions, in: &acl)
        } else {
            let created = try newEntry(qualifier, in: &acl)
            try makeEffective(created, qualifier, keeping: .none, adding: permissions, in: &acl)
        }
        return true
    }

    /// Removes the entry for `qualifier`. The rest keep their effective rights: they are
    /// clamped to the mask before it is recalculated (which can then only narrow it), and
    /// with no named entry left the mask equals the owning group's clamped rights, so
    /// dropping it leaves the same access and a plain mode-only node.
    static func remove(_ qualifier: ACLWriter.Qualifier, from acl: inout acl_t) throws(Errno) -> Bool {
        guard let existing = try findEntry(acl, tag: qualifier.tag, id: qualifier.id) else { return false }
        let mask = try maskPermissions(acl)
        guard acl_delete_entry(acl, existing) == 0 else { throw .current }
        // No mask means a minimal ACL, which cannot hold a named entry; nothing to keep then.
        guard let mask else { return true }
        try clampGroupClass(to: mask, in: acl, except: nil)
        try recalculateMask(&acl)
        if try !hasNamedEntries(acl), let maskEntry = try firstEntry(acl, where: { tag throws(Errno) in tag == acl_tag_t(ACL_MASK) }) {
            guard acl_delete_entry(acl, maskEntry) == 0 else { throw .current }
        }
        return true
    }

    /// An entry for `qualifier` with no rights yet.
    private static func newEntry(_ qualifier: ACLWriter.Qualifier, in acl: inout acl_t) throws(Errno) -> acl_entry_t {
        var optionalACL: acl_t? = acl
        var entry: acl_entry_t?
        let rc = acl_create_entry(&optionalACL, &entry)
        if let reallocated = optionalACL { acl = reallocated }
        guard rc == 0, let created = entry else { throw .current }
        guard acl_set_tag_type(created, qualifier.tag) == 0 else { throw .current }
        var id = qualifier.id
        guard acl_set_qualifier(created, &id) == 0 else { throw .current }
        try setPermissions(created, .none)
        return created
    }

    /// Gives `target` (the entry of `qualifier`, stored rights `current`) the rights `wanted`
    /// in effect, without changing what any other entry effectively grants.
    ///
    /// - No mask (a minimal ACL: owner, owning group, other): the new mask is the owning
    ///   group's rights plus `wanted`, so the owning group keeps exactly its rights.
    /// - A mask that already covers `wanted`: only the entry changes (to `current ∪ wanted`).
    /// - A mask that must grow: every other group-class entry is first clamped to what the
    ///   old mask let it do, and the entry keeps only its effective rights plus `wanted`,
    ///   so the recalculated mask grants nobody anything beyond `wanted` for `target`.
    private static func makeEffective(_ target: acl_entry_t, _ qualifier: ACLWriter.Qualifier,
                                      keeping current: AccessMode, adding wanted: AccessMode,
                                      in acl: inout acl_t) throws(Errno) {
        guard let mask = try maskPermissions(acl) else {
            try setPermissions(target, current.union(wanted))
            try recalculateMask(&acl)
            return
        }
        if mask.isSuperset(of: wanted) {
            try setPermissions(target, current.union(wanted))
            return
        }
        try clampGroupClass(to: mask, in: acl, except: qualifier)
        try setPermissions(target, current.intersection(mask).union(wanted))
        try recalculateMask(&acl)
    }

    /// Sets every group-class entry (owning group, named users and groups) but `except`'s to
    /// its rights ∧ `mask`: what it effectively grants now, so a wider mask later changes
    /// nothing for it.
    private static func clampGroupClass(to mask: AccessMode, in acl: acl_t, except: ACLWriter.Qualifier?)
        throws(Errno)
    {
        try ACLEntries.forEach(acl) { (tag, current) throws(Errno) in
            switch tag {
            case acl_tag_t(ACL_GROUP_OBJ):
                break
            case acl_tag_t(ACL_USER), acl_tag_t(ACL_GROUP):
                if let except, tag == except.tag, try ACLEntries.qualifier(current) == except.id { return }
            default:
                return
            }
            let permissions = try ACLEntries.permissions(current)
            if !mask.isSuperset(of: permissions) { try setPermissions(current, permissions.intersection(mask)) }
        }
    }

    private static func recalculateMask(_ acl: inout acl_t) throws(Errno) {
        var optionalACL: acl_t? = acl
        let rc = acl_calc_mask(&optionalACL)
        if let updated = optionalACL { acl = updated }
        guard rc == 0 else { throw .current }
    }

    static func findEntry(_ acl: acl_t, tag: acl_tag_t, id: UInt32) throws(Errno) -> acl_entry_t? {
        try ACLEntries.first(acl) { (entryTag, entry) throws(Errno) in
            guard entryTag == tag else { return false }
            return try ACLEntries.qualifier(entry) == id
        }
    }

    private static func hasNamedEntries(_ acl: acl_t) throws(Errno) -> Bool {
        try firstEntry(acl) { tag throws(Errno) in tag == acl_tag_t(ACL_USER) || tag == acl_tag_t(ACL_GROUP) } != nil
    }

    private static func firstEntry(_ acl: acl_t, where matches: (acl_tag_t) throws(Errno) -> Bool)
        throws(Errno) -> acl_entry_t?
    {
        try ACLEntries.first(acl) { (tag, _) throws(Errno) in try matches(tag) }
    }

    /// The mask's rights, or nil when the ACL has no mask.
    private static func maskPermissions(_ acl: acl_t) throws(Errno) -> AccessMode? {
        guard let mask = try firstEntry(acl, where: { tag throws(Errno) in tag == acl_tag_t(ACL_MASK) }) else { return nil }
        return try ACLEntries.permissions(mask)
    }

    private static func setPermissions(_ entry: acl_entry_t, _ mode: AccessMode) throws(Errno) {
        var permset: acl_permset_t?
        guard acl_get_permset(entry, &permset) == 0, let set = permset else { throw .current }
        guard acl_clear_perms(set) == 0 else { throw .current }
        for (flag, perm) in ACLEntries.bits where mode.contains(flag) {
            guard acl_add_perm(set, perm) == 0 else { throw .current }
        }
        guard acl_set_permset(entry, set) == 0 else { throw .current }
    }
}
