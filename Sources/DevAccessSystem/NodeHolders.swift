import CLinux
import DevAccessCore
import Glibc

/// A device node to look for among the open files of every process: the path devaccess
/// knows it by, and its device number, which is what is matched.
public struct WatchedNode: Sendable, Hashable {
    public var path: String
    public var major: UInt32
    public var minor: UInt32

    public init(path: String, major: UInt32, minor: UInt32) {
        self.path = path
        self.major = major
        self.minor = minor
    }
}

/// One descriptor of one process that has a watched node open.
public struct NodeHolder: Sendable, Hashable {
    public var pid: Int32
    /// Clock ticks after boot at which the process started (/proc/PID/stat): with `pid`, it
    /// names this process and no later one (`ProcessTarget`).
    public var startTicks: UInt64
    public var realUID: UInt32
    public var effectiveUID: UInt32
    /// The real uid's name; nil when the user database has none.
    public var userName: String?
    /// The executable (/proc/PID/exe) without " (deleted)"; nil when it cannot be read.
    public var program: String?
    /// The executable was removed or replaced after the process started it.
    public var programDeleted: Bool
    /// argv[0] as the process shows it now: the process can write anything there.
    public var command: String?
    /// The watched node the descriptor refers to.
    public var node: WatchedNode
    /// The descriptor's path as the kernel shows it: differs from `node.path` when the
    /// process opened the device through another node or a bind mount.
    public var openedPath: String
    public var fd: Int32
    /// What the descriptor was opened for (O_RDONLY, O_WRONLY, O_RDWR).
    public var access: AccessMode
    /// The group id of the `devaccess run` that started it (RunGroups), nil when none did.
    public var runGroup: UInt32?

    /// The process this descriptor belongs to, for `ProcessTerminator`.
    public var target: ProcessTarget { ProcessTarget(pid: pid, startTicks: startTicks) }
}

/// What one pass over /proc found.
public struct HolderScan: Sendable, Hashable {
    /// By pid, then descriptor.
    public var holders: [NodeHolder]
    /// Processes whose descriptors could not be read: another user's, when not run as root
    /// (kernel threads, which hold no files, and processes that exited meanwhile are not counted).
    public var uninspected: Int
}

/// Finds the processes that hold device nodes open. Changing a node's ACL does not close a
/// descriptor already open, so this is how to see who still uses a device after a revoke.
public enum NodeHolders {
    /// One pass over `proc`: every descriptor of every process is examined (statx with cached
    /// attributes, not a round trip to a network or FUSE file system's server) and matched
    /// by device number and character-device type, so a device opened through another node,
    /// a bind mount or a node re-created since is found too. Only matches are read further.
    public static func scan(for nodes: [WatchedNode], proc: String = "/proc") -> HolderScan {
        var byDevice: [UInt64: [WatchedNode]] = [:]
        for node in nodes { byDevice[deviceKey(node.major, node.minor), default: []].append(node) }
        var holders: [NodeHolder] = []
        var uninspected = 0
        guard !byDevice.isEmpty else { return HolderScan(holders: [], uninspected: 0) }
        _ = ProcessDirectories.forEach(in: proc) { pid, procFD in
            guard let process = ProcessDirectory(pid: pid, in: procFD) else { return }
            let fdDirectory = openat(process.fd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fdDirectory >= 0 else {
                // Another user's process (not root): its descriptors are private. Gone (ENOENT,
                // ESRCH) or a kernel thread: nothing to say.
                if errno == EACCES || errno == EPERM,
                   let credentials = process.credentials(), !credentials.kernelThread, !credentials.hasExited {
                    uninspected += 1
                }
                return
            }
            let matches = openDescriptors(fdDirectory, matching: byDevice)
            guard !matches.isEmpty, let credentials = process.credentials(), !credentials.hasExited else { return }
            let (program, deleted) = executable(process)
            let command = process.read("cmdline", limit: 1 << 16).flatMap(firstArgument)
            let userName = UserDatabase.userName(credentials.realUID)
            for (fd, candidates) in matches {
                // The descriptor may have been closed since it was examined: then it is not held.
                guard let opened = process.link("fd/\(fd)"), let access = accessMode(process, fd: fd) else { continue }
                let node = candidates.first { $0.path == opened } ?? candidates[0]
                holders.append(NodeHolder(pid: pid, startTicks: credentials.startTicks,
                                          realUID: credentials.realUID, effectiveUID: credentials.effectiveUID,
                                          userName: userName, program: program, programDeleted: deleted,
                                          command: command, node: node, openedPath: opened, fd: fd, access: access,
                                          runGroup: credentials.runGroup))
            }
        }
        holders.sort { ($0.pid, $0.fd) < ($1.pid, $1.fd) }
        return HolderScan(holders: holders, uninspected: uninspected)
    }

    /// The descriptors in an open /proc/PID/fd that are character devices with a watched
    /// number; takes `directory` over (closes it).
    private static func openDescriptors(_ directory: CInt, matching byDevice: [UInt64: [WatchedNode]])
        -> [(Int32, [WatchedNode])]
    {
        guard let listing = try? FileDescriptor(owning: directory).directoryStream() else { return [] }
        defer { closedir(listing) }
        var matches: [(Int32, [WatchedNode])] = []
        while let entry = readdir(listing) {
            guard let fd = ProcessDirectories.numericName(entry) else { continue }
            let found = withUnsafeBytes(of: &entry.pointee.d_name) { name in
                name.baseAddress.flatMap { CharacterDevice.numbers(of: $0.assumingMemoryBound(to: CChar.self), in: directory) }
            }
            guard let found, let nodes = byDevice[deviceKey(found.major, found.minor)] else { continue }
            matches.append((fd, nodes))
        }
        return matches
    }

    private static func deviceKey(_ major: UInt32, _ minor: UInt32) -> UInt64 {
        UInt64(major) << 32 | UInt64(minor)
    }

    /// The executable, and whether it has been deleted since. " (deleted)" is the kernel's
    /// suffix for an unlinked file, but a file may also be named so: the link count decides.
    private static func executable(_ process: borrowing ProcessDirectory) -> (String?, Bool) {
        guard let path = process.link("exe") else { return (nil, false) }
        let suffix = " (deleted)"
        guard path.hasSuffix(suffix) else { return (path, false) }
        var info = stat()
        guard fstatat(process.fd, "exe", &info, 0) == 0, info.st_nlink == 0 else { return (path, false) }
        return (String(path.dropLast(suffix.count)), true)
    }

    /// argv[0]: /proc/PID/cmdline up to its first NUL.
    private static func firstArgument(_ bytes: [UInt8]) -> String? {
        let first = bytes.prefix { $0 != 0 }
        return first.isEmpty ? nil : String(decoding: first, as: UTF8.self)
    }

    /// From the `flags:` line of /proc/PID/fdinfo/N (octal): O_RDONLY, O_WRONLY or O_RDWR; nil
    /// for an O_PATH descriptor, or when the descriptor was closed meanwhile.
    private static func accessMode(_ process: borrowing ProcessDirectory, fd: Int32) -> AccessMode? {
        guard let info = process.read("fdinfo/\(fd)", limit: 1 << 16) else { return nil }
        let prefix = Array("flags:".utf8)
        for line in info.split(separator: UInt8(ascii: "\n")) where line.starts(with: prefix) {
            let digits = String(decoding: line.dropFirst(prefix.count).filter { $0 != 0x20 && $0 != 0x09 }, as: UTF8.self)
            // An O_PATH descriptor names the node without opening the device (ACLWriter holds
            // such): it can neither read nor write it, and reopening it checks the ACL anew.
            guard let flags = UInt32(digits, radix: 8), flags & UInt32(devaccess_o_path()) == 0 else { return nil }
            switch CInt(flags & UInt32(O_ACCMODE)) {
            case O_RDONLY: return .read
            case O_WRONLY: return .write
            case O_RDWR: return .readWrite
            default: return AccessMode.none
            }
        }
        return nil
    }
}
