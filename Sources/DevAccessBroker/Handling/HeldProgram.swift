import Foundation
import Glibc
import Synchronization
import CSpawn
import DevAccessSystem
import DevAccessLedger
import DevAccessProtocol

/// A run's program: forked as its user and held before exec until devaccessd has recorded
/// the run and applied its access (so the program never starts without its access, nor keeps
/// running unrecorded), then released. It stays devaccessd's child: the pid cannot be reused
/// until devaccessd reaps it, so signals sent to its process group reach that program and
/// its group, never another process.
final class HeldProgram: Sendable {
    let pid: Int32
    let holder: ProcessHolder
    private let gate: CInt
    private let report: CInt
    private let state = Mutex(State())

    private struct State {
        /// Reaped: the pid may name another process now; nothing more is sent to it.
        var reaped = false
        var exit: RunExit?
        var execFailure: String?
        var hungUp = false
    }

    private init(pid: Int32, holder: ProcessHolder, gate: CInt, report: CInt) {
        self.pid = pid
        self.holder = holder
        self.gate = gate
        self.report = report
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func start(program: RunProgram, arguments: [String], environment: [String], directory: String,
                      umask: UInt32, streams: [CInt], uid: UInt32, gid: UInt32, groups: [UInt32],
                      strict: [String]?) throws(Failure) -> HeldProgram {
        if strict != nil {
            throw Failure(description: "--strict is not available in this version of devaccessd")
        }
        guard let bootID = ProcessTable.bootID() else { throw Failure(description: "the boot id cannot be read") }
        var pid: pid_t = 0
        var gate: CInt = -1
        var report: CInt = -1
        // Every C string and array is made before fork: the child only makes system calls.
        let spawned = CStrings.with(arguments) { argv in
            CStrings.with(environment) { envp in
                program.path.withCString { path in
                    directory.withCString { cwd in
                        groups.map { gid_t($0) }.withUnsafeBufferPointer { groupList in
                            var spec = devaccess_spawn_spec(
                                path: path, argv: argv, envp: envp, directory: cwd,
                                streams: (streams[0], streams[1], streams[2]), uid: uid_t(uid), gid: gid_t(gid),
                                groups: groupList.baseAddress, group_count: CInt(groupList.count), umask: mode_t(umask))
                            return devaccess_spawn_held(&spec, &pid, &gate, &report)
                        }
                    }
                }
            }
        }
        guard spawned == 0 else { throw Failure(description: "fork failed: \(Errno.current)") }
        guard let entry = ProcessTable.entry(pid) else {
            Glibc.close(gate)
            Glibc.close(report)
            var status: CInt = 0
            _ = waitpid(pid, &status, 0)
            throw Failure(description: "the program's process (pid \(pid)) vanished before it could be recorded")
        }
        let held = HeldProgram(pid: pid, holder: ProcessHolder(pid: pid, startTicks: entry.startTicks, bootID: bootID),
                               gate: gate, report: report)
        return held
    }

    /// Lets the program exec. False when it did not (`execFailure` says why; reap it with
    /// `waitForExit`).
    func release() -> Bool {
        var go: UInt8 = 1
        _ = send(gate, &go, 1, CInt(MSG_NOSIGNAL))
        Glibc.close(gate)
        var message: (CInt, CInt) = (0, 0)
        var count = 0
        repeat {
            count = withUnsafeMutableBytes(of: &message) { read(report, $0.baseAddress, $0.count) }
        } while count < 0 && errno == EINTR
        Glibc.close(report)
        // End of file without a message: exec closed the pipe; the program runs.
        if count == 0 { return true }
        let failure = count == MemoryLayout<(CInt, CInt)>.size
            ? Self.describe(step: message.0, errno: message.1) : "the program could not be started"
        state.withLock { $0.execFailure = failure }
        return false
    }

    var execFailure: String? { state.withLock { $0.execFailure } }

    /// The program is not to run: the gate closes, the child exits 127 unrun, and is reaped.
    func abandon() {
        Glibc.close(gate)
        Glibc.close(report)
        _ = waitForExit()
    }

    /// Relays a client's signal to the program's process group, while it is ours to signal.
    func relay(_ signal: Int32) {
        guard Self.relayable.contains(signal) else { return }
        state.withLock { state in
            guard !state.reaped else { return }
            _ = kill(-pid, signal)
        }
    }

    static let relayable: Set<Int32> = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP, SIGCONT,
                                        SIGWINCH, SIGTTIN, SIGTTOU]

    /// The client is gone (its terminal with it, as far as the program can tell): SIGHUP and
    /// SIGCONT to the group, as a closing terminal would send; SIGKILL after `grace`.
    func hangUp(grace: Duration = .seconds(10)) {
        let first = state.withLock { state -> Bool in
            guard !state.reaped, !state.hungUp else { return false }
            state.hungUp = true
            _ = kill(-pid, SIGHUP)
            _ = kill(-pid, SIGCONT)
            return true
        }
        guard first else { return }
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: Double(grace.components.seconds))
            state.withLock { state in
                guard !state.reaped else { return }
                _ = kill(-pid, SIGKILL)
            }
        }
    }

    /// Waits (on a thread of its own) until the program exits, without reaping it: until
    /// `reap()`, its pid (and process group) cannot name another process, so the run can be
    /// ended while the zombie still says which process it was.
    func exit() async -> RunExit {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { [self] in continuation.resume(returning: waitForExit(reaping: false)) }
        }
    }

    /// Blocks until the program exits; reaps it unless told not to.
    @discardableResult
    func waitForExit(reaping: Bool = true) -> RunExit {
        if let known = state.withLock({ $0.exit }) {
            if reaping { reap() }
            return known
        }
        var code: CInt = 0, signal: CInt = 0, core: CInt = 0
        let exit: RunExit = switch devaccess_wait_exit(pid, &code, &signal, &core) {
        case 1: .exited(code)
        case 2: .signaled(signal, coreDumped: core != 0)
        default: .exited(127)
        }
        state.withLock { $0.exit = exit }
        if reaping { reap() }
        return exit
    }

    /// Frees the pid. Nothing is sent to the process group from here on.
    func reap() {
        let first = state.withLock { state -> Bool in
            defer { state.reaped = true }
            return !state.reaped
        }
        guard first else { return }
        var status: CInt = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    static func describe(step: CInt, errno number: CInt) -> String {
        let error = String(cString: strerror(number))
        switch Int(step) {
        case Int(DEVACCESS_STEP_EXEC):
            return number == ENOENT ? "the program (or its interpreter) does not exist: \(error)"
                : number == EACCES ? "you may not execute the program: \(error)"
                : "the program could not be executed: \(error)"
        case Int(DEVACCESS_STEP_CHDIR): return "the working directory could not be entered as you: \(error)"
        case Int(DEVACCESS_STEP_SETGROUPS), Int(DEVACCESS_STEP_SETGID), Int(DEVACCESS_STEP_SETUID),
             Int(DEVACCESS_STEP_PRIVILEGES_KEPT):
            return "devaccessd could not take on your identity for the program: \(error)"
        case Int(DEVACCESS_STEP_STREAMS): return "your standard streams could not be given to the program: \(error)"
        default: return "the program's process could not be prepared (step \(step)): \(error)"
        }
    }
}

/// NUL-terminated arrays of C strings for execve, alive for the call.
enum CStrings {
    static func with<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { buffer in
            // The buffer always has the terminating nil, so it is never empty.
            body(buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!)
        }
    }
}

/// The environment a run's program gets: the caller's, less what could load other code into
/// it, so a `Program=` rule or a program grant names code devaccessd really started (the
/// list sudo's env_reset and glibc's secure mode drop, plus interpreters' and media stacks'
/// module paths). Documented in devaccess(1).
enum LaunchEnvironment {
    static let removedNames: Set<String> = [
        // glibc's unsecure variables (it drops them for setuid programs).
        "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH", "NLSPATH",
        "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
        // Interpreters loading code named by the environment.
        "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE", "PERL5LIB", "PERLLIB",
        "PERL5OPT", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
        "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4",
        // Media stacks' plugin paths (GStreamer, GIO, GTK, Qt).
        "GST_PLUGIN_PATH", "GST_PLUGIN_PATH_1_0", "GST_PLUGIN_SYSTEM_PATH", "GST_PLUGIN_SYSTEM_PATH_1_0",
        "GST_PLUGIN_SCANNER", "GST_PLUGIN_SCANNER_1_0", "GIO_EXTRA_MODULES", "GTK_MODULES", "GTK_PATH",
        "QT_PLUGIN_PATH", "QT_QPA_PLATFORM_PLUGIN_PATH",
    ]
    /// Every variable starting with one of these goes.
    static let removedPrefixes = ["LD_", "MALLOC_", "BASH_FUNC_"]

    static func clean(_ environment: [String]) -> (kept: [String], removed: [String]) {
        var kept: [String] = []
        var removed: [String] = []
        var seen = Set<Substring>()
        for entry in environment {
            guard let equals = entry.firstIndex(of: "="), equals != entry.startIndex else {
                removed.append(entry)
                continue
            }
            let name = entry[..<equals]
            // The first of two entries with one name is the one getenv() sees; a second could
            // reach a program that reads environ itself.
            guard seen.insert(name).inserted else {
                removed.append(String(name))
                continue
            }
            if removedNames.contains(String(name)) || removedPrefixes.contains(where: { name.hasPrefix($0) }) {
                removed.append(String(name))
            } else {
                kept.append(entry)
            }
        }
        return (kept, removed)
    }
}
