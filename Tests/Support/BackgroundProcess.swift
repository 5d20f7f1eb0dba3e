import Foundation
import Glibc

/// A process left running for a test (holding a node open, ignoring SIGTERM), killed and
/// reaped when the test lets go of it. Started with posix_spawn and every signal at its
/// default and unblocked: a test thread's blocked signals (which Foundation's Process would
/// pass on) must not decide whether SIGTERM ends it.
public final class BackgroundProcess: @unchecked Sendable {
    public let pid: Int32
    /// The wait status, once reaped.
    private var status: Int32?

    /// Starts `executable`; standard input, output and error are /dev/null.
    public init(_ executable: String, _ arguments: [String]) throws {
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawnattr_init(&attributes)
        defer {
            posix_spawn_file_actions_destroy(&actions)
            posix_spawnattr_destroy(&attributes)
        }
        for fd: Int32 in 0...2 {
            posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard result == 0 else { throw SetupError("posix_spawn \(executable): \(String(cString: strerror(result)))") }
        self.pid = pid
    }

    /// `script` run by /bin/sh as `user` (its uid, its primary gid, and `groups` as its
    /// supplementary groups, exactly), or as root when nil. End the script with `exec sleep N`
    /// so the pid is the sleeper's.
    public convenience init(shell script: String, as user: TestUser? = nil, groups: [UInt32] = []) throws {
        var arguments: [String] = []
        if let user {
            arguments += ["--reuid=\(user.uid)", "--regid=\(user.gid)"]
        }
        arguments += groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.map(String.init).joined(separator: ",")]
        try self.init("/usr/bin/setpriv", arguments + ["--", "/bin/sh", "-c", script])
    }

    /// Waits (up to `timeout`, a generous bound) until the process runs `program`: setpriv and
    /// the shell have exec'd into it, so whatever the script opened before is open.
    public func waitUntilRunning(_ program: String, timeout: TimeInterval = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == program { return }
            guard isRunning else { throw SetupError("pid \(pid) exited (wait status \(status ?? -1))") }
            usleep(10_000)
        }
        throw SetupError("pid \(pid) did not exec \(program) within \(timeout) s")
    }

    /// Not exited (a zombie has; it is reaped here).
    public var isRunning: Bool {
        reap(blocking: false)
        return status == nil
    }

    /// Waits for it to exit (it has been signalled) and reaps it.
    public func waitForExit() { reap(blocking: true) }

    /// The signal that ended it, once reaped; nil when it exited by itself or still runs.
    public var terminationSignal: Int32? {
        guard let status, status & 0x7f != 0, status & 0x7f != 0x7f else { return nil }
        return status & 0x7f
    }

    private func reap(blocking: Bool) {
        guard status == nil else { return }
        var waited: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &waited, blocking ? 0 : WNOHANG) } while result < 0 && errno == EINTR
        if result == pid { status = waited }
    }

    deinit {
        if status == nil {
            kill(pid, SIGKILL)
            reap(blocking: true)
        }
    }
}

extension TemporaryDirectory {
    /// A character node with the given numbers (1:7 is /dev/full, 1:5 /dev/zero: they really
    /// open, and unlike /dev/null (1:3) no other process on the machine is likely to hold them).
    public func makeNode(_ name: String, major: UInt32, minor: UInt32, mode: String = "0666") throws -> String {
        let node = "\(path)/\(name)"
        try TestProcess.setup("mknod", ["-m", mode, node, "c", String(major), String(minor)])
        return node
    }
}
