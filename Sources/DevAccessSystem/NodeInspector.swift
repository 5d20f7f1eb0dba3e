import Glibc
import CAcl
import CLinux
import DevAccessCore

/// Reads a node's type, numbers, owner, mode and access ACL through one
/// `O_PATH|O_NOFOLLOW` descriptor, so a symlink is reported, never followed.
public enum NodeInspector {
    public enum InspectionError: Error, Equatable, CustomStringConvertible {
        case vanished(String)
        case failed(String, operation: String, Errno)

        public var description: String {
            switch self {
            case .vanished(let path):
                return "\(path) no longer exists (the device went away while it was examined)"
            case .failed(let path, let operation, let errno):
                return "\(operation) \(path) failed: \(errno)"
            }
        }
    }

    public static func inspect(_ path: String) throws(InspectionError) -> NodeFacts {
        let fd: FileDescriptor
        switch Result(catching: { () throws(Errno) in try FileDescriptor.openPath(path) }) {
        case .success(let opened): fd = opened
        case .failure(.noSuchFile): throw .vanished(path)
        case .failure(let error): throw .failed(path, operation: "open", error)
        }
        var info = stat()
        if fstat(fd.rawValue, &info) != 0 {
            throw .failed(path, operation: "fstat", .current)
        }
        let kind = fileKind(info.st_mode)
        var facts = NodeFacts(
            path: path, kind: kind,
            major: devaccess_major(info.st_rdev), minor: devaccess_minor(info.st_rdev),
            ownerUID: info.st_uid, ownerName: UserDatabase.userName(info.st_uid),
            groupGID: info.st_gid, groupName: UserDatabase.groupName(info.st_gid),
            mode: UInt32(info.st_mode) & 0o7777)
        if kind != .symlink {
            do {
                facts.acl = try ACLReader.extendedEntries(at: fd.procPath)
            } catch {
                if error == .noSuchFile { throw .vanished(path) }
                // A file system without ACL support has only the mode: that is the answer.
                if error != .notSupported { throw .failed(path, operation: "reading the ACL of", error) }
            }
        }
        return facts
    }

    static func fileKind(_ mode: mode_t) -> NodeFacts.FileKind {
        switch mode & S_IFMT {
        case S_IFCHR: return .characterDevice
        case S_IFBLK: return .blockDevice
        case S_IFREG: return .regular
        case S_IFDIR: return .directory
        case S_IFLNK: return .symlink
        default: return .other
        }
    }
}

/// libacl, read side: the access ACL of a file as `ACLEntry` values.
public enum ACLReader {
    /// The entries of the access ACL, or nil when it is equivalent to the mode bits.
    public static func extendedEntries(at path: String) throws(Errno) -> [ACLEntry]? {
        guard let acl = acl_get_file(path, acl_type_t(ACL_TYPE_ACCESS)) else { throw .current }
        defer { acl_free(UnsafeMutableRawPointer(acl)) }
        // acl_equiv_mode returns 0 when the ACL holds only the three base entries.
        if acl_equiv_mode(acl, nil) == 0 { return nil }
        return try entries(of: acl)
    }

    static func entries(of acl: acl_t) throws(Errno) -> [ACLEntry] {
        var result: [ACLEntry] = []
        var entry: acl_entry_t?
        var which = ACL_FIRST_ENTRY
        while true {
            let rc = acl_get_entry(acl, which, &entry)
            if rc == 0 { break }
            guard rc == 1, let current = entry else { throw .current }
            which = ACL_NEXT_ENTRY
            var tagType = acl_tag_t()
            guard acl_get_tag_type(current, &tagType) == 0 else { throw .current }
            var permset: acl_permset_t?
            guard acl_get_permset(current, &permset) == 0, let perms = permset else { throw .current }
            var access = AccessMode.none
            if acl_get_perm(perms, acl_perm_t(ACL_READ)) == 1 { access.insert(.read) }
            if acl_get_perm(perms, acl_perm_t(ACL_WRITE)) == 1 { access.insert(.write) }
            if acl_get_perm(perms, acl_perm_t(ACL_EXECUTE)) == 1 { access.insert(.execute) }

            switch tagType {
            case acl_tag_t(ACL_USER_OBJ): result.append(ACLEntry(tag: .userObject, permissions: access))
            case acl_tag_t(ACL_GROUP_OBJ): result.append(ACLEntry(tag: .groupObject, permissions: access))
            case acl_tag_t(ACL_MASK): result.append(ACLEntry(tag: .mask, permissions: access))
            case acl_tag_t(ACL_OTHER): result.append(ACLEntry(tag: .other, permissions: access))
            case acl_tag_t(ACL_USER), acl_tag_t(ACL_GROUP):
                guard let qualifier = acl_get_qualifier(current) else { throw .current }
                let id = qualifier.load(as: UInt32.self)
                acl_free(qualifier)
                if tagType == acl_tag_t(ACL_USER) {
                    result.append(ACLEntry(tag: .user(id), permissions: access,
                                           qualifierName: UserDatabase.userName(id)))
                } else {
                    result.append(ACLEntry(tag: .group(id), permissions: access,
                                           qualifierName: UserDatabase.groupName(id)))
                }
            default:
                continue
            }
        }
        return result
    }
}
