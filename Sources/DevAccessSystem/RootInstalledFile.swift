import Glibc
import CLinux

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

    /// The file `name` under `directory` names (a /proc link: an executable, a mapped file) as
    /// the kernel last knew it (`AT_STATX_DONT_SYNC`): a FUSE file's server is not asked, so
    /// one that never answers cannot hold the caller. nil with errno set when it fails.
    public static func cached(_ directory: CInt, _ name: String) -> FileKey? {
        var info = statx()
        guard devaccess_statx(directory, name, AT_STATX_DONT_SYNC, UInt32(STATX_INO), &info) == 0 else { return nil }
        return FileKey(device: UInt64(devaccess_makedev(info.stx_dev_major, info.stx_dev_minor)), inode: info.stx_ino)
    }
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
    /// Devices of FUSE mounts, read once per checker.
    private var fuseDevices: Set<UInt64>?

    public init() {}

    /// nil when `path` is such a file and is `expected` (the very file a process runs or
    /// maps, as the kernel reports it); else why not, as a phrase that follows the path
    /// ("owned by uid 1001").
    public mutating func flaw(_ path: String, expected: FileKey) -> String? {
        guard path.hasPrefix("/") else { return "not an absolute path" }
        // Before any lookup: a FUSE server (a user's, through fusermount3) says what owner its
        // files have, and a lookup as root on a mount of a server that never answers waits for good.
        if fuses.contains(expected.device) { return "on a FUSE file system, whose server says who owns its files" }
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

    /// The devices of this mount namespace's FUSE mounts (`fuse`, `fuse.NAME`, `fuseblk`).
    private var fuses: Set<UInt64> {
        mutating get {
            if let fuseDevices { return fuseDevices }
            var found = Set<UInt64>()
            let text = (try? FileDescriptor.contents(of: "/proc/self/mountinfo")).map { String(decoding: $0, as: UTF8.self) }
            for line in (text ?? "").split(separator: "\n") {
                let fields = line.split(separator: " ")
                guard let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count, fields.count > 2,
                      fields[dash + 1].hasPrefix("fuse") else { continue }
                let numbers = fields[2].split(separator: ":").compactMap { UInt32($0) }
                if numbers.count == 2 { found.insert(UInt64(devaccess_makedev(numbers[0], numbers[1]))) }
            }
            fuseDevices = found
            return found
        }
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
