import Glibc
import Synchronization
import DevAccessCore

/// Looks users and groups up in the system databases (NSS).
public enum UserDatabase {
    public enum LookupError: Error, Equatable, CustomStringConvertible {
        case noSuchUser(String)
        case noSuchUID(UInt32)
        case invalidUID(String)
        case lookupFailed(String, Errno)

        public var description: String {
            switch self {
            case .noSuchUser(let name):
                return "no user named '\(name)' (check the name with 'getent passwd \(name)')"
            case .noSuchUID(let uid):
                return "no user with uid \(uid) (check with 'getent passwd \(uid)')"
            case .invalidUID(let text):
                return "'\(text)' is not a user name or a uid (uids are 0...4294967294)"
            case .lookupFailed(let what, let errno):
                return "looking up user '\(what)' failed: \(errno)"
            }
        }
    }

    /// Resolves a user name or a decimal uid to the identity a fresh login would have.
    public static func identity(for nameOrUID: String) throws(LookupError) -> UserIdentity {
        if let first = nameOrUID.first, first.isNumber {
            guard let uid = UInt32(nameOrUID), uid != UInt32.max else { throw .invalidUID(nameOrUID) }
            return try identity(uid: uid)
        }
        guard !nameOrUID.isEmpty, !nameOrUID.contains(":"), !nameOrUID.contains("\0") else {
            throw .invalidUID(nameOrUID)
        }
        guard let entry = try passwd(named: nameOrUID) else { throw .noSuchUser(nameOrUID) }
        return identity(entry)
    }

    public static func identity(uid: UInt32) throws(LookupError) -> UserIdentity {
        guard let entry = try passwd(uid: uid) else { throw .noSuchUID(uid) }
        return identity(entry)
    }

    public static func userName(_ uid: UInt32) -> String? {
        (try? passwd(uid: uid))??.name
    }

    /// The gid of group `name`, nil when there is none (or NSS fails).
    public static func groupID(_ name: String) -> UInt32? {
        lookupGroup({ group, buffer, result in getgrnam_r(name, &group, buffer.baseAddress, buffer.count, &result) },
                    read: { $0.gr_gid })
    }

    public static func groupName(_ gid: UInt32) -> String? {
        lookupGroup({ group, buffer, result in getgrgid_r(gid, &group, buffer.baseAddress, buffer.count, &result) },
                    read: { $0.gr_name.map { String(cString: $0) } })
    }

    /// The uids of every member of group `gid`: its listed members (`gr_mem`) and the users
    /// whose primary group it is. Names that resolve to no user are left out.
    public static func members(ofGroup gid: UInt32) -> [UInt32] {
        let names = lookupGroup({ group, buffer, result in getgrgid_r(gid, &group, buffer.baseAddress, buffer.count, &result) },
                                read: { group -> [String] in
            var names: [String] = []
            var cursor = group.gr_mem
            while let member = cursor?.pointee {
                names.append(String(cString: member))
                cursor = cursor?.advanced(by: 1)
            }
            return names
        }) ?? []
        var uids = Set(names.compactMap { (try? passwd(named: $0))??.uid })
        uids.formUnion(primaryMembers(gid))
        return uids.sorted()
    }

    /// The passwd database is walked with one cursor per process (`setpwent`): one walk at a time.
    private static let walking = Mutex(())

    /// Users whose primary group is `gid` (a walk of the whole passwd database).
    private static func primaryMembers(_ gid: UInt32) -> [UInt32] {
        walking.withLock { _ in
            setpwent()
            defer { endpwent() }
            var uids: [UInt32] = []
            var buffer = [CChar](repeating: 0, count: 4096)
            while true {
                var pwd = Glibc.passwd()
                var result: UnsafeMutablePointer<Glibc.passwd>?
                let rc = getpwent_r(&pwd, &buffer, buffer.count, &result)
                if rc == ERANGE && buffer.count < 1 << 20 {
                    buffer = [CChar](repeating: 0, count: buffer.count * 4)
                    continue
                }
                guard rc == 0, let entry = result else { return uids }
                if entry.pointee.pw_gid == gid { uids.append(entry.pointee.pw_uid) }
            }
        }
    }

    /// One `getgr*_r` call with a buffer that grows on ERANGE (up to 1 MiB). The entry's
    /// strings point into the buffer, so `read` takes what it needs before it is freed.
    private static func lookupGroup<T>(
        _ call: (inout Glibc.group, UnsafeMutableBufferPointer<CChar>, inout UnsafeMutablePointer<Glibc.group>?) -> CInt,
        read: (Glibc.group) -> T?
    ) -> T? {
        var size = 1024
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            var group = Glibc.group()
            var result: UnsafeMutablePointer<Glibc.group>?
            let (rc, value) = buffer.withUnsafeMutableBufferPointer { pointer -> (CInt, T?) in
                let rc = call(&group, pointer, &result)
                guard rc == 0, let found = result else { return (rc, nil) }
                return (rc, read(found.pointee))
            }
            if rc == ERANGE {
                size *= 4
                continue
            }
            return value
        }
        return nil
    }

    // MARK: - passwd

    struct PasswdEntry {
        var name: String
        var uid: UInt32
        var gid: UInt32
    }

    static func passwd(named name: String) throws(LookupError) -> PasswdEntry? {
        try lookupPasswd(describing: name) { pwd, buffer, result in
            getpwnam_r(name, &pwd, &buffer, buffer.count, &result)
        }
    }

    static func passwd(uid: UInt32) throws(LookupError) -> PasswdEntry? {
        try lookupPasswd(describing: String(uid)) { pwd, buffer, result in
            getpwuid_r(uid, &pwd, &buffer, buffer.count, &result)
        }
    }

    private static func lookupPasswd(
        describing what: String,
        _ call: (inout passwd, inout [CChar], inout UnsafeMutablePointer<passwd>?) -> CInt
    ) throws(LookupError) -> PasswdEntry? {
        var size = 1024
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            var pwd = Glibc.passwd()
            var result: UnsafeMutablePointer<Glibc.passwd>?
            let rc = call(&pwd, &buffer, &result)
            if rc == ERANGE {
                size *= 4
                continue
            }
            // "Not found" is reported as rc 0 with a nil result, or as ENOENT/ESRCH/EBADF/EPERM
            // by some NSS modules.
            if rc != 0 && ![ENOENT, ESRCH, EBADF, EPERM].contains(rc) {
                throw .lookupFailed(what, Errno(rawValue: rc))
            }
            guard rc == 0, let found = result, let name = found.pointee.pw_name else { return nil }
            return PasswdEntry(name: String(cString: name), uid: found.pointee.pw_uid, gid: found.pointee.pw_gid)
        }
        throw .lookupFailed(what, Errno(rawValue: ERANGE))
    }

    private static func identity(_ entry: PasswdEntry) -> UserIdentity {
        let gids = groupList(name: entry.name, primary: entry.gid)
        return UserIdentity(uid: entry.uid, name: entry.name, primaryGID: entry.gid,
                            groups: gids.map { GroupRef(gid: $0, name: groupName($0)) })
    }

    /// Every group of the user, as `initgroups` at login would set them.
    static func groupList(name: String, primary: UInt32) -> [UInt32] {
        var count: CInt = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            var wanted = count
            if getgrouplist(name, primary, &groups, &wanted) != -1 {
                return Array(groups.prefix(Int(wanted)))
            }
            // -1: the buffer was too small and `wanted` holds the size needed.
            count = max(wanted, count * 2)
        }
    }
}
