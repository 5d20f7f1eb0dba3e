import Glibc

/// One file as the kernel knows it: device and inode. Two paths naming the same key name
/// the same file; a file replaced at its path gets another key.
public struct FileKey: Sendable, Hashable, CustomStringConvertible {
    public var device: UInt64
    public var inode: UInt64

    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    public var description: String { "\(device):\(inode)" }
}

/// Whether a file may stand for code that root installed: only root can have written it
/// or can put another file in its place. That is a regular file owned by root and
/// writable by neither its group nor others, in directories that are likewise root's
/// alone (whoever may write a directory may rename another file over the one in it;
/// a sticky directory owned by root, like /tmp, lets nobody else do that to root's entries).
/// Group-writable is refused even for group root: membership of a group is not root.
/// An ACL that lets others write shows in the group bits (the mask), so the mode says it.
///
/// One checker per reading: it remembers the directories it has judged, since most
/// mapped libraries share a few.
public struct RootInstalledFile {
    private var directories: [String: String?] = [:]

    public init() {}

    /// nil when `path` is such a file and is `expected` (the very file a process runs or
    /// maps, as the kernel reports it); else why not, as a phrase that follows the path
    /// ("owned by uid 1001").
    public mutating func flaw(_ path: String, expected: FileKey) -> String? {
        guard path.hasPrefix("/") else { return "not an absolute path" }
        var info = stat()
        guard lstat(path, &info) == 0 else { return "not checkable (\(Errno.current))" }
        guard info.st_mode & S_IFMT == S_IFREG else { return "not a regular file" }
        guard FileKey(info) == expected else {
            return "not the file at that path any more (replaced since the process started or mapped it)"
        }
        if info.st_uid != 0 { return "owned by uid \(info.st_uid)" }
        if info.st_mode & 0o022 != 0 { return "writable by its group or others (mode \(Self.octal(info.st_mode)))" }
        if let flaw = Self.mountFlaw(path) { return flaw }
        var directory = path
        while let slash = directory.lastIndex(of: "/") {
            directory = slash == directory.startIndex ? "/" : String(directory[..<slash])
            if let flaw = directoryFlaw(directory) { return "in \(directory), \(flaw)" }
            if directory == "/" { break }
        }
        return nil
    }

    private mutating func directoryFlaw(_ directory: String) -> String? {
        if let known = directories[directory] { return known }
        var info = stat()
        let flaw: String?
        if lstat(directory, &info) != 0 {
            flaw = "not checkable (\(Errno.current))"
        } else if info.st_mode & S_IFMT != S_IFDIR {
            // The kernel reports canonical paths; a symlink here means a path from elsewhere.
            flaw = "which is not a directory"
        } else if info.st_uid != 0 {
            flaw = "owned by uid \(info.st_uid)"
        } else if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            // Sticky (like /tmp): others may add entries there but never rename or remove
            // root's, so a root-owned entry in it still stands for what root put there.
            flaw = "writable by its group or others (mode \(Self.octal(info.st_mode)))"
        } else {
            flaw = nil
        }
        directories[directory] = flaw
        return flaw
    }

    /// The owner a user-mounted file system reports is whatever its server or medium says: a
    /// FUSE server (`fusermount3`) or a stick mounted through udisks can say root. Both are
    /// mounted nosuid, as every mount a user may make is; where root installs programs is not.
    static func mountFlaw(_ path: String) -> String? {
        var volume = statvfs()
        guard statvfs(path, &volume) == 0 else { return "not checkable (\(Errno.current))" }
        guard volume.f_flag & UInt(ST_NOSUID) == 0 else {
            return "on a file system mounted nosuid (as users' own mounts are: FUSE, removable media), whose files' "
                + "owner is whatever the file system says"
        }
        return nil
    }

    static func octal(_ mode: mode_t) -> String {
        let text = String(UInt32(mode) & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - text.count)) + text
    }
}
