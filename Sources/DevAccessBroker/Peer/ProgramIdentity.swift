import Glibc
import CSystemd
import DevAccessSystem

/// What runs in a process, read from /proc pinned to it, and whether devaccessd may name
/// it by its executable where a name decides something (`Program=` rules).
///
/// `/proc/PID/exe` alone is not code identity: `LD_PRELOAD=evil.so /usr/bin/sleep` runs
/// the user's code as /usr/bin/sleep. So the identity is trusted only when the executable
/// AND every file mapped executable (/proc/PID/maps: libraries, preloads, the dynamic
/// loader) is a file only root can have written (`RootInstalledFile`), and the process
/// is the same one, running the same executable, from the first read to the last. A
/// deleted or memfd-backed executable mapping is not trusted. Anonymous executable memory
/// (JIT) is not judged; interpreters are judged as themselves (docs/mechanisms.md).
public struct ProgramIdentity: Sendable, Hashable {
    public var pid: Int32
    public var parent: Int32
    /// Clock ticks after boot (/proc/PID/stat field 22): with the pid, names one process
    /// over time (an exec keeps it; a new process with a reused pid does not have it).
    public var startTime: UInt64
    /// The real uid (/proc/PID/status); nil when unreadable.
    public var uid: UInt32?
    /// /proc/PID/exe as the kernel reports it.
    public var path: String
    /// The executable's file (through /proc/PID/exe, so the file that runs, not the path).
    public var executable: FileKey
    /// nil: trusted; else why not, as a sentence part ("/home/u/evil.so is mapped
    /// executable and owned by uid 1001").
    public var untrusted: String?

    public var isTrusted: Bool { untrusted == nil }

    /// Why nothing could be read: the process is gone, or /proc refuses.
    public struct Unreadable: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Reads the identity of `pid` from `directory` (its open /proc/PID). `pidfd` pins the
    /// process: it is checked alive after the last read, so everything read came from
    /// this process and not from a later one with the same pid. `startedAt`: the start
    /// time an earlier reading found (the same process, not one with a reused pid).
    static func read(pid: Int32, directory: CInt, pinnedBy pidfd: CInt,
                     startedAt expected: UInt64? = nil) -> Result<ProgramIdentity, Unreadable> {
        guard let text = ProcFile.read(directory, "stat"), let stat = ProcStat(text) else {
            return .failure(Unreadable(description: "/proc/\(pid)/stat cannot be read (the process exited?)"))
        }
        if let expected, stat.startTime != expected {
            return .failure(Unreadable(description:
                "process \(pid) is not the one that connected (that one ended and its pid was reused)"))
        }
        let first: (path: String, key: FileKey)
        switch executable(directory) {
        case .success(let found): first = found
        case .failure(let error): return .failure(Unreadable(description: "/proc/\(pid)/exe: \(error)"))
        }
        var identity = ProgramIdentity(pid: pid, parent: stat.parent, startTime: stat.startTime, uid: nil,
                                       path: first.path, executable: first.key)
        identity.untrusted = judge(first, directory: directory, pid: pid)
        if identity.untrusted == nil {
            // An exec between the reads would show as another executable now.
            switch executable(directory) {
            case .success(let again) where again == first: break
            case .success(let again):
                identity.untrusted = "the process started another program (\(again.path)) while it was being identified"
            case .failure(let error): return .failure(Unreadable(description: "/proc/\(pid)/exe: \(error)"))
            }
        }
        identity.uid = ProcFile.readAll(directory, "status", limit: 65536).flatMap(Self.realUID)
        guard Peer.isAlive(pidfd) else {
            return .failure(Unreadable(description: "process \(pid) exited while its program was being identified"))
        }
        return .success(identity)
    }

    /// Pins `pid` with a new pidfd and reads its identity; `startedAt` must match.
    static func read(pid: Int32, startedAt expected: UInt64?) -> Result<ProgramIdentity, Unreadable> {
        let pidfd = devaccess_pidfd_open(pid, 0)
        guard pidfd >= 0 else {
            return .failure(Unreadable(description: "process \(pid) is gone (pidfd_open: \(Errno.current))"))
        }
        let pin = FileDescriptor(owning: pidfd)
        let directory: FileDescriptor
        do {
            directory = try .open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            return .failure(Unreadable(description: "/proc/\(pid): \(error.errno)"))
        }
        return read(pid: pid, directory: directory.rawValue, pinnedBy: pin.rawValue, startedAt: expected)
    }

    /// The executable's path and file, through the pinned /proc directory.
    private static func executable(_ directory: CInt) -> Result<(path: String, key: FileKey), Errno> {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlinkat(directory, "exe", &buffer, buffer.count - 1)
        guard count >= 0 else { return .failure(.current) }
        let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let key = FileKey.cached(directory, "exe") else { return .failure(.current) }
        return .success((path, key))
    }

    /// nil when the executable and every executable mapping are root's alone; else the first flaw.
    private static func judge(_ exe: (path: String, key: FileKey), directory: CInt, pid: Int32) -> String? {
        var files = RootInstalledFile()
        if exe.path.hasSuffix(" (deleted)") {
            return "the executable \(exe.path) was deleted or replaced since the process started"
        }
        if let flaw = files.flaw(exe.path, expected: exe.key) { return "the executable \(exe.path) is \(flaw)" }
        // Bounded: the process chooses how many mappings it has (up to vm.max_map_count), and
        // this runs on the connection thread. Real programs' maps are a few hundred KiB at
        // most; a larger one is not judged, so it is not trusted.
        guard let maps = ProcFile.readAll(directory, "maps", limit: Self.mapsLimit) else {
            return "/proc/\(pid)/maps cannot be read or is over \(Self.mapsLimit / 1024) KiB, so what the process "
                + "runs is not judged"
        }
        var judged = Set<String>()
        var seen = Set<Substring>()
        var executableMapped = false
        for line in maps.split(separator: "\n") {
            guard let mapping = Mapping(line), mapping.executable, let path = mapping.path,
                  !path.hasPrefix("[") else { continue }   // [vdso], [vsyscall]: the kernel's
            if path.hasPrefix("/memfd:") { return "\(path) (a memfd) is mapped executable" }
            if path.hasSuffix(" (deleted)") {
                return "\(path) is mapped executable and was deleted or replaced since it was mapped"
            }
            if mapping.writable { return "\(path) is mapped writable and executable" }
            // The same file mapped again (same device, inode and name) was judged already.
            guard seen.insert(mapping.file).inserted else { continue }
            // The file mapped, as the kernel holds it; map_files needs CAP_SYS_ADMIN (root has it).
            // Cached: a FUSE file's server is not asked (RootInstalledFile refuses FUSE files).
            guard let key = FileKey.cached(directory, "map_files/\(mapping.fileName)") else {
                return "\(path) is mapped executable and cannot be checked (map_files: \(Errno.current))"
            }
            if key == exe.key { executableMapped = true }
            guard judged.insert("\(key) \(path)").inserted else { continue }
            if let flaw = files.flaw(path, expected: key) { return "\(path) is mapped executable and \(flaw)" }
        }
        // The maps are of another image than the executable read before them: an exec came between.
        guard executableMapped else { return "the process started another program while it was being identified" }
        return nil
    }

    /// The first number of the `Uid:` line (real, effective, saved, filesystem).
    static func realUID(_ status: String) -> UInt32? {
        for line in status.split(separator: "\n") where line.hasPrefix("Uid:") {
            return line.dropFirst(4).split(whereSeparator: { $0 == "\t" || $0 == " " }).first.flatMap { UInt32($0) }
        }
        return nil
    }

    /// One line of /proc/PID/maps: "start-end perms offset dev inode   path".
    /// The most of /proc/PID/maps that is read (`judge`).
    static let mapsLimit = 512 * 1024

    struct Mapping {
        var range: Substring
        var executable: Bool
        var writable: Bool
        /// "device inode path" as maps shows them: the same file mapped again.
        var file: Substring
        /// nil: anonymous memory.
        var path: String?

        /// The mapping's name in /proc/PID/map_files: the range without the zeros maps pads with.
        var fileName: String {
            range.split(separator: "-").map { part in
                let digits = part.drop { $0 == "0" }
                return digits.isEmpty ? "0" : String(digits)
            }.joined(separator: "-")
        }

        init?(_ line: Substring) {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5, fields[1].count == 4 else { return nil }
            range = fields[0]
            executable = fields[1].dropFirst(2).first == "x"
            writable = fields[1].dropFirst(1).first == "w"
            file = line[fields[3].startIndex...]
            if fields.count == 6 {
                let rest = fields[5].drop { $0 == " " }
                path = rest.isEmpty ? nil : String(rest)
            }
        }
    }
}

/// The fields of /proc/PID/stat the identity uses.
struct ProcStat {
    var parent: Int32
    var startTime: UInt64

    init?(_ text: String) {
        // The name (field 2) may hold spaces and parentheses: the fields follow its last ')'.
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the name: state(0) ppid(1) ... starttime(19), field 22 of the whole line.
        guard fields.count > 19, let parent = Int32(fields[1]), let start = UInt64(fields[19]) else { return nil }
        self.parent = parent
        startTime = start
    }
}
