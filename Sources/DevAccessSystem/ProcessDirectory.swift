import DevAccessCore
import Glibc

/// One process's /proc/PID, held open: every read through it concerns that process, even if
/// the process exits and its pid is given to another (the reads then fail).
struct ProcessDirectory: ~Copyable {
    let pid: Int32
    let descriptor: FileDescriptor
    var fd: CInt { descriptor.rawValue }

    /// nil when the process is gone or /proc cannot be opened.
    init?(pid: Int32, in proc: CInt) {
        let fd = openat(proc, String(pid), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        self.pid = pid
        self.descriptor = FileDescriptor(owning: fd)
    }

    /// The whole of a small file (status, stat, cmdline, fdinfo/N); nil when unreadable or over `limit`.
    func read(_ name: String, limit: Int = 1 << 20) -> [UInt8]? {
        let file = openat(fd, name, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { return nil }
        // One byte over the limit is read, so a longer file is told from one of the limit.
        guard let bytes = try? FileDescriptor(owning: file).contents(limit: limit + 1), bytes.count <= limit else {
            return nil
        }
        return bytes
    }

    /// A link's target (exe, fd/N) as the kernel shows it; nil when unreadable.
    func link(_ name: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlinkat(fd, name, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The Uid: and Groups: lines of status and the start time of stat, read through this directory.
    func credentials() -> ProcessCredentials? {
        guard let status = read("status"), let stat = read("stat") else { return nil }
        return ProcessCredentials(status: status, stat: stat)
    }
}

/// One process's /proc/PID held open for as long as its holder lives (a connection keeps its
/// peer's from connect on): what is read through it is that process's, and reads fail once
/// it is gone (reaped), even after its pid was given to another. Equal only to itself.
public final class PinnedProcess: Sendable, Hashable {
    public let pid: Int32
    private let directory: ProcessDirectory

    /// nil when the process is gone or /proc cannot be opened. Pinned to whichever process
    /// has `pid` now: a caller that must know which one checks that after (a pidfd, a start time).
    public init?(pid: Int32) {
        guard let proc = try? FileDescriptor.open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC),
              let directory = ProcessDirectory(pid: pid, in: proc.rawValue) else { return nil }
        self.pid = pid
        self.directory = directory
    }

    /// The open /proc/PID, for `openat`-style reads; owned here.
    public var descriptor: CInt { directory.fd }

    /// The whole of a small file of the process (limits, status); nil when unreadable (gone).
    public func read(_ name: String, limit: Int = 1 << 20) -> [UInt8]? {
        directory.read(name, limit: limit)
    }

    public static func == (left: PinnedProcess, right: PinnedProcess) -> Bool { left === right }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// Who a process runs as, from /proc/PID/status, and when it started, from /proc/PID/stat.
struct ProcessCredentials {
    var realUID: UInt32 = 0
    var effectiveUID: UInt32 = 0
    var groups: [UInt32] = []
    var state: Character = "?"
    var startTicks: UInt64 = 0
    /// PF_KTHREAD in stat's flags: a kernel thread, which has no open files.
    var kernelThread = false

    init?(status: [UInt8], stat: [UInt8]) {
        var sawUid = false
        for line in status.split(separator: UInt8(ascii: "\n")) {
            if line.starts(with: Self.uidPrefix) {
                let ids = Self.numbers(line.dropFirst(Self.uidPrefix.count))
                guard ids.count >= 2 else { return nil }
                realUID = ids[0]
                effectiveUID = ids[1]
                sawUid = true
            } else if line.starts(with: Self.groupsPrefix) {
                groups = Self.numbers(line.dropFirst(Self.groupsPrefix.count))
            }
        }
        // stat: "pid (name) S ppid ..."; the name may hold anything, so fields count from the last ')'.
        guard sawUid, let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = stat[(close + 1)...].split(separator: UInt8(ascii: " "))
        guard fields.count > 19, let state = fields[0].first,
              let start = UInt64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
        self.state = Character(Unicode.Scalar(state))
        startTicks = start
        kernelThread = fields.count > 6 && (UInt32(String(decoding: fields[6], as: UTF8.self)) ?? 0) & 0x0020_0000 != 0
    }

    /// Exited (a zombie waiting for its parent) or dying: holds nothing, runs nothing.
    var hasExited: Bool { state == "Z" || state == "X" || state == "x" }

    /// The first of its supplementary groups that `devaccess run` hands out.
    var runGroup: UInt32? { groups.first(where: RunGroups.contains) }

    private static let uidPrefix = Array("Uid:".utf8)
    private static let groupsPrefix = Array("Groups:".utf8)

    private static func numbers(_ text: ArraySlice<UInt8>) -> [UInt32] {
        text.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
            .compactMap { UInt32(String(decoding: $0, as: UTF8.self)) }
    }
}

/// Walks the numeric entries of /proc (the processes; threads are not listed there).
enum ProcessDirectories {
    /// Calls `body` with each pid under `proc` and the open /proc directory; false when `proc` cannot be read.
    static func forEach(in proc: String, _ body: (Int32, CInt) -> Void) -> Bool {
        guard let procFD = try? FileDescriptor.open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC) else { return false }
        // The walk has a descriptor of its own, so it and the openat()s do not share a position.
        let fd = procFD.rawValue
        return forEach(directory: fd) { body($0, fd) }
    }

    /// Calls `body` with each numeric entry of an open directory (/proc/PID/task: the
    /// thread ids); false when it cannot be listed. `directory` stays open.
    static func forEach(directory: CInt, _ body: (Int32) -> Void) -> Bool {
        guard let listing = try? FileDescriptor.duplicate(directory).directoryStream() else { return false }
        defer { closedir(listing) }
        while let entry = readdir(listing) {
            if let number = numericName(entry) { body(number) }
        }
        return true
    }

    /// The entry's name as a positive number (a pid, an fd), without making a String.
    static func numericName(_ entry: UnsafeMutablePointer<dirent>) -> Int32? {
        withUnsafeBytes(of: &entry.pointee.d_name) { name -> Int32? in
            var value: Int32 = 0
            var digits = 0
            for byte in name {
                if byte == 0 { break }
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 10 else { return nil }
                let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = shifted.addingReportingOverflow(Int32(byte - UInt8(ascii: "0")))
                guard !overflow, !overflow2 else { return nil }
                value = sum
                digits += 1
            }
            return digits > 0 ? value : nil
        }
    }
}
