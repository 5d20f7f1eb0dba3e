import Glibc
import CAcl
import CLinux
import DevAccessCore
import DevAccessSystem

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
        switch Result(catching: { () throws(SystemCallError) in try FileDescriptor.openPath(path) }) {
        case .success(let opened): fd = opened
        case .failure(let error) where error.isNotFound: throw .vanished(path)
        case .failure(let error): throw .failed(path, operation: "open", error.errno)
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
        try ACLEntries.forEach(acl) { (tag, current) throws(Errno) in
            let access = try ACLEntries.permissions(current)
            switch tag {
            case acl_tag_t(ACL_USER_OBJ): result.append(ACLEntry(tag: .userObject, permissions: access))
            case acl_tag_t(ACL_GROUP_OBJ): result.append(ACLEntry(tag: .groupObject, permissions: access))
            case acl_tag_t(ACL_MASK): result.append(ACLEntry(tag: .mask, permissions: access))
            case acl_tag_t(ACL_OTHER): result.append(ACLEntry(tag: .other, permissions: access))
            case acl_tag_t(ACL_USER):
                let uid = try ACLEntries.qualifier(current)
                result.append(ACLEntry(tag: .user(uid), permissions: access, qualifierName: UserDatabase.userName(uid)))
            case acl_tag_t(ACL_GROUP):
                let gid = try ACLEntries.qualifier(current)
                result.append(ACLEntry(tag: .group(gid), permissions: access, qualifierName: UserDatabase.groupName(gid)))
            default:
                break
            }
        }
        return result
    }
}
