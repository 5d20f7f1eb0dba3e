import FoundationEssentials
import Glibc

/// What /proc says about one process: enough to tell whether a pid still names the process
/// that was seen earlier (its start time) and whether it still runs (not a zombie).
public struct ProcessEntry: Sendable, Hashable {
    /// /proc/PID/stat field 3: `R`, `S`, `D`, `Z` (exited, not yet reaped), `X`, ...
    public var state: Character
    public var parent: Int32
    /// Field 22: clock ticks after boot at which the process started. A pid is reused only
    /// by a later process, which started later: (pid, start) names one process per boot.
    public var startTicks: UInt64

    /// Exited (a zombie waiting for its parent) or dying.
    public var hasExited: Bool { state == "Z" || state == "X" || state == "x" }
}

public enum ProcessTable {
    /// The process `pid` as /proc shows it now; nil when there is none.
    public static func entry(_ pid: Int32) -> ProcessEntry? {
        guard pid > 0, let text = read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        // After the name (which may hold spaces and parentheses): field 3 on, one per word.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let state = fields[0].first, let parent = Int32(fields[1]),
              let start = UInt64(fields[19]) else { return nil }
        return ProcessEntry(state: state, parent: parent, startTicks: start)
    }

    /// This boot's id (/proc/sys/kernel/random/boot_id), nil when unreadable.
    public static func bootID() -> String? {
        read("/proc/sys/kernel/random/boot_id")?.trimmingWhitespace()
    }

    private static func read(_ path: String) -> String? {
        guard let file = try? FileDescriptor.open(path, O_RDONLY | O_CLOEXEC) else { return nil }
        let fd = file.rawValue
        var buffer = [UInt8](repeating: 0, count: 4096)
        guard case .success(let count) = valueOrErrno({ Glibc.read(fd, &buffer, buffer.count) }), count > 0 else {
            return nil
        }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }
}
