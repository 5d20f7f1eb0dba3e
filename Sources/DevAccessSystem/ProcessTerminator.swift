import CLinux
import DevAccessCore
import Glibc

/// One process, named so that a later process given the same pid is not mistaken for it:
/// its pid and the time it started (clock ticks after boot, /proc/PID/stat field 22).
public struct ProcessTarget: Sendable, Hashable {
    public var pid: Int32
    public var startTicks: UInt64

    public init(pid: Int32, startTicks: UInt64) {
        self.pid = pid
        self.startTicks = startTicks
    }
}

/// A process held by a pidfd. Signals go through the pidfd, so they reach this process or
/// none: once it has exited, its pid may name another process, which they never reach.
public final class ProcessHandle {
    public let target: ProcessTarget
    private let pin: FileDescriptor
    private var pidfd: CInt { pin.rawValue }

    /// Opens `target` if it still runs: the pid's process now started at `target.startTicks`
    /// (else the pid names a later process, or none). nil otherwise.
    public init?(_ target: ProcessTarget) {
        let pidfd = devaccess_process_pidfd(target.pid)
        guard pidfd >= 0 else { return nil }
        let pin = FileDescriptor(owning: pidfd)
        // The pidfd names whichever process had the pid at open. /proc is read after it: if the
        // pidfd's process still runs after the read, the pid was its all along, so the start
        // time read is its own.
        guard let entry = ProcessTable.entry(target.pid), entry.startTicks == target.startTicks, !entry.hasExited,
              !ProcessHandle.hasExited(pidfd) else { return nil }
        self.target = target
        self.pin = pin
    }

    /// Exited (a zombie counts: it runs no more and holds nothing).
    public var hasExited: Bool { ProcessHandle.hasExited(pidfd) }

    /// Sends `signal` to this process; ESRCH when it has exited meanwhile (nothing else is signalled).
    public func signal(_ signal: CInt) -> Result<Void, Errno> {
        valueOrErrno { devaccess_pidfd_send(pidfd, signal) }.map { _ in () }
    }

    /// Waits until every handle's process has exited or `timeout` has passed; returns the
    /// indices of those that exited.
    public static func waitForExit(_ handles: [ProcessHandle], timeout: Duration) -> Set<Int> {
        var exited = Set<Int>()
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            var descriptors = handles.enumerated().filter { !exited.contains($0.offset) }.map {
                pollfd(fd: $0.element.pidfd, events: Int16(POLLIN), revents: 0)
            }
            let open = handles.indices.filter { !exited.contains($0) }
            guard !descriptors.isEmpty else { return exited }
            let left = deadline - clock.now
            let milliseconds = max(0, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
            let ready = poll(&descriptors, nfds_t(descriptors.count), CInt(min(milliseconds, Int64(CInt.max))))
            if ready < 0 && errno == EINTR { continue }
            for (slot, descriptor) in descriptors.enumerated() where descriptor.revents != 0 { exited.insert(open[slot]) }
            if ready <= 0 { return exited }
        }
    }

    static func hasExited(_ pidfd: CInt) -> Bool {
        var descriptor = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) != 0
    }
}

/// Ends processes: SIGTERM, a grace period to exit, then SIGKILL for the rest.
public enum ProcessTerminator {
    public enum Ending: Sendable, Hashable, CustomStringConvertible {
        /// Exited within the grace period after SIGTERM.
        case terminated
        /// Still running after the grace period: SIGKILL ended it.
        case killed
        /// Not running when asked (exited, or the pid names another process now): not signalled.
        case notRunning
        /// The kernel refused the signal (EPERM: not root, not the same user).
        case refused(Errno)
        /// Still there after SIGKILL and `killWait` (uninterruptible sleep in a driver).
        case unkillable

        public var description: String {
            switch self {
            case .terminated: return "terminated (SIGTERM)"
            case .killed: return "killed (SIGKILL after the grace period)"
            case .notRunning: return "not running; not signalled"
            case .refused(let errno): return "signal refused: \(errno)"
            case .unkillable: return "still running after SIGKILL"
            }
        }
    }

    public struct Outcome: Sendable, Hashable {
        public var target: ProcessTarget
        public var ending: Ending
    }

    /// Ends `targets`: SIGTERM to each that still runs, up to `grace` for them to exit, SIGKILL
    /// to the rest, then up to `killWait` for those. Blocks until done; one outcome per target,
    /// in order. `grace` zero: SIGTERM and SIGKILL at once.
    public static func terminate(_ targets: [ProcessTarget], grace: Duration,
                                 killWait: Duration = .seconds(5)) -> [Outcome] {
        var endings = [Ending?](repeating: nil, count: targets.count)
        var handles: [(index: Int, handle: ProcessHandle)] = []
        for (index, target) in targets.enumerated() {
            guard let handle = ProcessHandle(target) else {
                endings[index] = .notRunning
                continue
            }
            switch handle.signal(SIGTERM) {
            case .success: handles.append((index, handle))
            case .failure(let error) where error == Errno(rawValue: ESRCH): endings[index] = .notRunning
            case .failure(let error): endings[index] = .refused(error)
            }
        }
        let exited = ProcessHandle.waitForExit(handles.map(\.handle), timeout: grace)
        var killed: [(index: Int, handle: ProcessHandle)] = []
        for (slot, entry) in handles.enumerated() {
            if exited.contains(slot) {
                endings[entry.index] = .terminated
                continue
            }
            switch entry.handle.signal(SIGKILL) {
            case .success: killed.append(entry)
            case .failure(let error) where error == Errno(rawValue: ESRCH): endings[entry.index] = .terminated
            case .failure(let error): endings[entry.index] = .refused(error)
            }
        }
        let died = ProcessHandle.waitForExit(killed.map(\.handle), timeout: killWait)
        for (slot, entry) in killed.enumerated() {
            endings[entry.index] = died.contains(slot) ? .killed : .unkillable
        }
        return targets.indices.map { Outcome(target: targets[$0], ending: endings[$0] ?? .notRunning) }
    }
}

/// The processes of one `devaccess run`: every live process carrying its group id in its
/// supplementary groups, which its descendants inherit however they detach (setsid, double
/// fork, a new process group). Only a process with CAP_SETGID can drop the id.
public enum RunProcesses {
    /// Every live process (not a zombie) whose supplementary groups include `gid`, by pid.
    /// /proc/PID/status is world-readable, so this needs no privilege.
    public static func carrying(group gid: UInt32, proc: String = "/proc") -> [ProcessTarget] {
        var found: [ProcessTarget] = []
        _ = ProcessDirectories.forEach(in: proc) { pid, procFD in
            guard let process = ProcessDirectory(pid: pid, in: procFD), let credentials = process.credentials(),
                  !credentials.hasExited, credentials.groups.contains(gid) else { return }
            found.append(ProcessTarget(pid: pid, startTicks: credentials.startTicks))
        }
        return found.sorted { $0.pid < $1.pid }
    }

    /// Ends every process of the run with group `gid` (`ProcessTerminator`: SIGTERM, `grace`,
    /// SIGKILL). Processes started meanwhile (forked during the grace period) are looked for
    /// again and killed at once, until none is left or `rounds` searches have been made.
    public static func end(group gid: UInt32, grace: Duration, rounds: Int = 50,
                           proc: String = "/proc") -> [ProcessTerminator.Outcome] {
        var outcomes = ProcessTerminator.terminate(carrying(group: gid, proc: proc), grace: grace)
        var seen = Set(outcomes.map(\.target))
        for _ in 1..<max(rounds, 2) {
            let fresh = carrying(group: gid, proc: proc).filter { !seen.contains($0) }
            guard !fresh.isEmpty else { break }
            seen.formUnion(fresh)
            outcomes += ProcessTerminator.terminate(fresh, grace: .zero)
        }
        return outcomes
    }
}
