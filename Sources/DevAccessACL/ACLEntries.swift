import CAcl
import DevAccessCore
import DevAccessSystem

/// Walking and reading libacl entries: the one place both the reader (status) and
/// the writer (enforcement) step through an ACL.
enum ACLEntries {
    /// Walks the entries in order and returns the first that `matches`.
    static func first(_ acl: acl_t, where matches: (acl_tag_t, acl_entry_t) throws(Errno) -> Bool)
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

    /// Calls `body` for every entry, in order.
    static func forEach(_ acl: acl_t, _ body: (acl_tag_t, acl_entry_t) throws(Errno) -> Void) throws(Errno) {
        _ = try first(acl) { (tag, entry) throws(Errno) in
            try body(tag, entry)
            return false
        }
    }

    /// The uid or gid of an ACL_USER or ACL_GROUP entry.
    static func qualifier(_ entry: acl_entry_t) throws(Errno) -> UInt32 {
        guard let qualifier = acl_get_qualifier(entry) else { throw .current }
        defer { acl_free(qualifier) }
        return qualifier.load(as: UInt32.self)
    }

    static let bits: [(AccessMode, acl_perm_t)] = [
        (.read, acl_perm_t(ACL_READ)), (.write, acl_perm_t(ACL_WRITE)), (.execute, acl_perm_t(ACL_EXECUTE)),
    ]

    static func permissions(_ entry: acl_entry_t) throws(Errno) -> AccessMode {
        var permset: acl_permset_t?
        guard acl_get_permset(entry, &permset) == 0, let set = permset else { throw .current }
        var mode = AccessMode.none
        for (flag, perm) in bits where acl_get_perm(set, perm) == 1 { mode.insert(flag) }
        return mode
    }
}
