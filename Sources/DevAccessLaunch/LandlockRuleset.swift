import CLinux
import CSpawn
import Glibc
import Synchronization
import DevAccessSystem

/// A Landlock ruleset for `devaccess run --strict`: the program may open every file for
/// reading and writing except the denied paths (device nodes the run was not granted).
///
/// Landlock denies what a ruleset handles unless a rule allows it beneath some directory on
/// the way to the file. This ruleset handles only READ_FILE and WRITE_FILE (ABI 1, the
/// oldest Landlock) and, where the kernel has it, IOCTL_DEV (ABI 5), so executing (which needs READ_FILE: exec opens the file for reading,
/// and so does the dynamic loader for libraries), listing directories, creating and removing
/// stay unrestricted. Its rules: for every directory on the way from / to a denied path, one
/// rule for each entry that is neither denied nor itself on the way to a denied path. The
/// denied nodes and the directories leading to them get none.
///
/// Rules attach to inodes and Landlock checks the path the kernel resolved, so a symlink to
/// a denied node (/dev/v4l/by-id/...), `/proc/self/root/...` and a reopen through
/// `/proc/self/fd/N` of an O_PATH descriptor all reach the denied inode and are denied;
/// symlinks themselves get no rule (one could never lie on a resolved path). Limits: a file
/// created later directly in a directory on the way (a device plugged in later appearing in
/// /dev) is denied too (fail closed); a bind mount that already shows a denied node under a
/// directory that has a rule would let it through (the program itself cannot mount: Landlock
/// forbids that to confined processes).
public final class LandlockRuleset: Sendable {
    /// The ruleset's descriptor; -1 once closed.
    private let descriptor: Mutex<CInt>
    /// The denied paths as resolved (symlinks followed), sorted.
    public let deniedPaths: [String]
    /// How many path rules the ruleset holds.
    public let ruleCount: Int

    /// The kernel's Landlock ABI version; nil when the kernel has no Landlock (not built in,
    /// or not enabled with `lsm=` at boot).
    public static func abiVersion() -> Int? {
        let version = devaccess_landlock_abi_version()
        return version > 0 ? Int(version) : nil
    }

    /// The access rights this ruleset handles: ABI 1's READ_FILE and WRITE_FILE, and from
    /// ABI 5 on IOCTL_DEV. `open(path, 3)` (neither read nor write, as `fdformat` opens a
    /// device) needs neither file right, yet its descriptor's ioctls reach the driver: on a
    /// camera, USERPTR streaming captures frames without read() or mmap() (hostile review
    /// 2026-12-01). Handling IOCTL_DEV refuses ioctls on a denied node's descriptor however
    /// it was opened; before ABI 5 that way stays open.
    static func handledAccess(abi: Int) -> UInt64 {
        let files = UInt64(DEVACCESS_LANDLOCK_ACCESS_FS_READ_FILE) | UInt64(DEVACCESS_LANDLOCK_ACCESS_FS_WRITE_FILE)
        return abi >= 5 ? files | UInt64(DEVACCESS_LANDLOCK_ACCESS_FS_IOCTL_DEV) : files
    }

    private init(descriptor: CInt, deniedPaths: [String], ruleCount: Int) {
        self.descriptor = Mutex(descriptor)
        self.deniedPaths = deniedPaths
        self.ruleCount = ruleCount
    }

    /// A ruleset denying reads and writes of the files at `denied` (absolute paths; a path
    /// that does not exist is denied as written) and allowing them everywhere else.
    public static func allowingEverythingExcept(_ denied: [String]) throws(LandlockError) -> LandlockRuleset {
        let version = devaccess_landlock_abi_version()
        guard version > 0 else { throw .unavailable(version < 0 ? .current : Errno(rawValue: ENOSYS)) }
        var deniedSet = Set<String>()
        for path in denied { deniedSet.insert(try resolved(path)) }
        if deniedSet.contains("/") { throw .deniesEverything }
        // Every directory on the way to a denied path; one below a denied directory needs no walk.
        var onTheWay = Set<String>()
        for path in deniedSet {
            var parent = directoryName(path)
            while true {
                onTheWay.insert(parent)
                if parent == "/" { break }
                parent = directoryName(parent)
            }
        }
        let walked = onTheWay.filter { directory in
            !deniedSet.contains(directory) && !ancestors(of: directory).contains(where: deniedSet.contains)
        }

        let handled = handledAccess(abi: Int(version))
        let created = devaccess_landlock_create_ruleset(handled)
        guard created >= 0 else { throw .createRuleset(.current) }
        let ruleset = LandlockRuleset(descriptor: created, deniedPaths: deniedSet.sorted(), ruleCount: 0)
        var rules = 0
        // Nothing denied: one rule for / allows every read and write (a ruleset without rules
        // would deny them all).
        if deniedSet.isEmpty, try addRule("/", to: created, access: handled) { rules += 1 }
        for directory in walked.sorted() {
            for name in try entries(of: directory) {
                let path = directory == "/" ? "/" + name : directory + "/" + name
                if deniedSet.contains(path) || onTheWay.contains(path) { continue }
                if try addRule(path, to: created, access: handled) { rules += 1 }
            }
        }
        return LandlockRuleset(taking: ruleset, ruleCount: rules)
    }

    /// Moves the descriptor of `other` (which is left closed) into a ruleset with the count.
    private convenience init(taking other: LandlockRuleset, ruleCount: Int) {
        let fd = other.descriptor.withLock { fd in
            defer { fd = -1 }
            return fd
        }
        self.init(descriptor: fd, deniedPaths: other.deniedPaths, ruleCount: ruleCount)
    }

    /// Closes the ruleset now (launches afterwards fail); later calls do nothing. Programs
    /// already confined by it stay confined.
    public func close() {
        let fd = descriptor.withLock { fd in
            defer { fd = -1 }
            return fd
        }
        if fd >= 0 { _ = Glibc.close(fd) }
    }

    public var isClosed: Bool { descriptor.withLock { $0 < 0 } }

    /// A close-on-exec copy of the descriptor for one launch, for the caller to close; -1
    /// once closed (or out of descriptors).
    func duplicateDescriptor() -> CInt {
        descriptor.withLock { fd in fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1 }
    }

    deinit { close() }

    // MARK: - Paths

    /// `path` with symlinks resolved (the inode the kernel reaches). When it does not exist:
    /// its resolved directory and its name, or (no directory either) the path as written,
    /// without `.`, `..` and repeated slashes.
    static func resolved(_ path: String) throws(LandlockError) -> String {
        guard path.hasPrefix("/") else { throw .notAbsolute(path) }
        if let real = realPath(path) { return real }
        guard errno == ENOENT else { throw .resolve(path, .current) }
        var parts: [Substring] = []
        for part in path.split(separator: "/") {
            if part == "." { continue }
            if part == ".." { _ = parts.popLast(); continue }
            parts.append(part)
        }
        let written = "/" + parts.joined(separator: "/")
        guard let name = parts.last, let directory = realPath(directoryName(written)) else { return written }
        return (directory == "/" ? "" : directory) + "/" + name
    }

    private static func realPath(_ path: String) -> String? {
        guard let real = realpath(path, nil) else { return nil }
        defer { free(real) }
        return String(cString: real)
    }

    static func directoryName(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// The directories above `path`, nearest first, "/" last.
    static func ancestors(of path: String) -> [String] {
        var result: [String] = []
        var current = path
        while current != "/" {
            current = directoryName(current)
            result.append(current)
        }
        return result
    }

    private static func entries(of directory: String) throws(LandlockError) -> [String] {
        do {
            return try DirectoryListing.names(directory)
        } catch {
            // A directory on the way to a denied path that does not exist: nothing to allow.
            if error.isNotFound { return [] }
            throw .readDirectory(directory, error.errno)
        }
    }

    /// Adds a rule allowing `access` (every handled right) beneath `path`. False for what gets
    /// no rule: a symlink, an entry that vanished meanwhile, a file on a filesystem Landlock
    /// takes no rules for (nsfs and the like; it stays denied).
    private static func addRule(_ path: String, to ruleset: CInt, access: UInt64) throws(LandlockError) -> Bool {
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.openPath(path)
        } catch {
            if error.isNotFound { return false }
            throw .open(path, error.errno)
        }
        var info = stat()
        guard fstat(fd.rawValue, &info) == 0 else { throw .open(path, .current) }
        if info.st_mode & S_IFMT == S_IFLNK { return false }
        guard devaccess_landlock_add_path_rule(ruleset, fd.rawValue, access) == 0 else {
            if errno == EBADFD { return false }
            throw .addRule(path, .current)
        }
        return true
    }
}

/// Why a Landlock ruleset could not be made.
public enum LandlockError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The kernel has no Landlock: ENOSYS (not built in) or EOPNOTSUPP (not enabled at boot).
    case unavailable(Errno)
    case notAbsolute(String)
    case deniesEverything
    case resolve(String, Errno)
    case createRuleset(Errno)
    case readDirectory(String, Errno)
    case open(String, Errno)
    case addRule(String, Errno)

    public var description: String {
        switch self {
        case .unavailable(let errno):
            return "this kernel has no Landlock (\(errno.message)); --strict needs Linux 5.13 or later with"
                + " landlock in the lsm= boot parameter (or CONFIG_LSM)"
        case .notAbsolute(let path):
            return "\(path): a denied path must be absolute"
        case .deniesEverything:
            return "denying / would deny every file; name the device nodes to deny"
        case .resolve(let path, let errno):
            return "cannot resolve \(path): \(errno.message)"
        case .createRuleset(let errno):
            return "cannot create a Landlock ruleset: \(errno.message)"
        case .readDirectory(let path, let errno):
            return "cannot list \(path) to build the Landlock ruleset: \(errno.message)"
        case .open(let path, let errno):
            return "cannot open \(path) to build the Landlock ruleset: \(errno.message)"
        case .addRule(let path, let errno):
            return "cannot add a Landlock rule for \(path): \(errno.message)"
        }
    }
}
