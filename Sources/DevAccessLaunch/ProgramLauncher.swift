import CSpawn
import DevAccessCore
import Glibc
import Synchronization
import DevAccessSystem

/// Everything `devaccess run` decides about the program it starts for a caller.
public struct LaunchSpec: Sendable {
    /// The file `execve(2)` runs, as is: no `PATH` search (the broker resolves it first).
    /// With `executableDescriptor`, only the program's name in messages.
    public var executable: String
    /// The file to run instead of a path (`execveat`, `AT_EMPTY_PATH`): the one devaccessd
    /// opened and decided on, whatever the path names by then. Borrowed, as the streams are;
    /// the program gets it open (a `#!` script's interpreter reads the script through it).
    public var executableDescriptor: CInt?
    /// The program's `argv`, `argv[0]` included.
    public var arguments: [String]
    /// "K=V" entries, passed exactly (see `LaunchEnvironment.clean` for what to take out).
    public var environment: [String]
    /// Entered after the ids are dropped, so only a directory the user may enter works.
    public var workingDirectory: String
    /// Descriptors that become the program's 0, 1 and 2. Borrowed: the caller keeps owning
    /// them (and should close its copies once the launch returned). They may coincide.
    public var standardInput: CInt
    public var standardOutput: CInt
    public var standardError: CInt
    public var uid: UInt32
    public var gid: UInt32
    /// Exactly the program's supplementary groups: the user's, plus the run's own group id.
    public var supplementaryGroups: [UInt32]
    public var umask: UInt32
    /// `--strict`: the program runs confined by this ruleset (and with `no_new_privs`).
    public var landlock: LandlockRuleset?
    /// A group no file may be given by the program (chown and friends fail with EPERM): the
    /// run's own, which its program is a member of, so it cannot make a setgid file that
    /// would carry the group (and the devices) to the user's other processes.
    public var guardedGroup: UInt32?
    /// Resource limits the program gets (`ResourceLimits.of(pid:)`: the caller's), set before
    /// the ids change; empty: devaccessd's own.
    public var resourceLimits: [ResourceLimit] = []

    public init(executable: String, arguments: [String], environment: [String], workingDirectory: String,
                standardInput: CInt, standardOutput: CInt, standardError: CInt,
                uid: UInt32, gid: UInt32, supplementaryGroups: [UInt32], umask: UInt32 = 0o022,
                landlock: LandlockRuleset? = nil) {
        self.executable = executable
        self.arguments = arguments
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.standardInput = standardInput
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.uid = uid
        self.gid = gid
        self.supplementaryGroups = supplementaryGroups
        self.umask = umask
        self.landlock = landlock
    }
}

/// A program that was started: its exec succeeded. Reap it (`wait`, or
/// `exitStatusIfEnded` once the pidfd is readable): one never reaped stays a zombie until
/// devaccessd exits. A class, so that devaccessd can keep its runs in any collection.
public final class LaunchedProcess: Sendable {
    public let pid: Int32
    /// A pidfd for the program, owned by this object (closed on deinit): readable (`poll`
    /// POLLIN) once the program exited; waits go through it, so they concern this process
    /// even after its pid was reused. nil on kernels before 5.3.
    public let pidfd: CInt?
    /// Reaped (the pid, and the process group id, may name others now) and how it ended.
    private let ending = Mutex<ProcessExit?>(nil)

    init(pid: Int32, pidfd: CInt?) {
        self.pid = pid
        self.pidfd = pidfd
    }

    deinit {
        if let pidfd { close(pidfd) }
    }

    /// Blocks until the program ended and reaps it.
    public func wait() throws(Errno) -> ProcessExit {
        while true {
            if let status = try reap(blocking: true) { return status }
        }
    }

    /// Blocks until the program ended, without reaping it: until `wait()` reaps, the zombie
    /// keeps its pid (and process group id) from naming another process, and still says which
    /// process it was, so its end can be recorded before anyone could take it for gone.
    public func waitUntilEnded() throws(Errno) -> ProcessExit {
        while true {
            if let known = ending.withLock({ $0 }) { return known }
            var status: CInt = 0
            let seen = try valueOrErrno { devaccess_wait(pidfd ?? -1, pid, 0, 1, &status) }.get()
            if seen == 1, let exit = ProcessExit(waitStatus: status) { return exit }
        }
    }

    /// Reaps the program if it ended; nil while it runs.
    public func exitStatusIfEnded() throws(Errno) -> ProcessExit? {
        try reap(blocking: false)
    }

    /// Sends `signal` to the program's process group (the program and what it started in its
    /// group), but only while the program is not reaped: until then its pid, which is the
    /// group's id, cannot name another process or group. False once reaped, or when kill failed.
    @discardableResult
    public func signalGroup(_ signal: Int32) -> Bool {
        ending.withLock { ending in ending == nil && kill(-pid, signal) == 0 }
    }

    /// Sends `signal` to the program itself, which may have left its group (setpgid into
    /// a group of its own child's): under the same rule as `signalGroup`.
    @discardableResult
    public func signalProgram(_ signal: Int32) -> Bool {
        ending.withLock { ending in ending == nil && kill(pid, signal) == 0 }
    }

    /// The ending is first seen without reaping (WNOWAIT, outside the lock: it may block),
    /// then reaped under the lock that `signalGroup` takes, so no signal can go to a freed pid.
    private func reap(blocking: Bool) throws(Errno) -> ProcessExit? {
        if let known = ending.withLock({ $0 }) { return known }
        var status: CInt = 0
        let seen: CInt
        switch valueOrErrno({ devaccess_wait(pidfd ?? -1, pid, blocking ? 0 : 1, 1, &status) }) {
        case .success(let value): seen = value
        case .failure(let error):
            // Another thread reaped it meanwhile.
            if error.rawValue == ECHILD, let known = ending.withLock({ $0 }) { return known }
            throw error
        }
        guard seen == 1, let exit = ProcessExit(waitStatus: status) else { return nil }
        return ending.withLock { ending in
            if let known = ending { return known }
            var ignored: CInt = 0
            _ = valueOrErrno { devaccess_wait(pidfd ?? -1, pid, 1, 0, &ignored) }
            ending = exit
            return exit
        }
    }
}

/// A program forked and set up as its user (ids, groups, working directory, Landlock, no
/// other descriptors) that waits before exec: devaccessd learns the pid, records the run and
/// applies its access, then `release`s it, or `abandon`s it if that failed. The program so
/// never runs without its access, nor with it unrecorded. Dropped without either: abandoned.
public final class HeldLaunch: Sendable {
    public let pid: Int32
    private let template: LaunchError
    /// nil once released or abandoned.
    private let child: Mutex<devaccess_spawn_held?>

    init(child: devaccess_spawn_held, template: LaunchError) {
        pid = child.pid
        self.template = template
        self.child = Mutex(child)
    }

    /// Lets it exec. Returns once exec succeeded; throws the step otherwise (the child is
    /// reaped then). A held child killed before this (after setuid the user may) shows as a
    /// program that ended by that signal.
    public func release() throws(LaunchError) -> LaunchedProcess {
        guard var held = child.withLock({ child -> devaccess_spawn_held? in
            defer { child = nil }
            return child
        }) else {
            var error = template
            (error.step, error.errno, error.detail) = (.arguments, Errno(rawValue: EINVAL), "already released or abandoned")
            throw error
        }
        var result = devaccess_spawn_result()
        guard devaccess_spawn_release(&held, &result) == 0 else {
            var error = template
            (error.step, error.errno) = (LaunchError.Step(code: result.step), Errno(rawValue: result.error))
            throw error
        }
        return LaunchedProcess(pid: result.pid, pidfd: result.pidfd >= 0 ? result.pidfd : nil)
    }

    /// It is not to run: it exits 127 without exec and is reaped. Later calls do nothing.
    public func abandon() {
        guard var held = child.withLock({ child -> devaccess_spawn_held? in
            defer { child = nil }
            return child
        }) else { return }
        devaccess_spawn_abandon(&held)
    }

    deinit { abandon() }
}

/// Why a program was not started: the step that failed and its errno. The child is gone
/// (reaped) when this is thrown.
public struct LaunchError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Step: String, Sendable {
        /// Checked before fork: something that cannot be passed to a program.
        case arguments
        case pipe, fork, pidfd
        /// The child's report of its failure could not be read.
        case report
        case signals
        case processGroup = "process group"
        case standardStreams = "standard streams"
        case setgroups, setgid, setuid
        /// After dropping to the user's uid, setuid(0) still worked.
        case privilegesKept = "privilege check"
        case chdir
        case noNewPrivileges = "no_new_privs"
        case landlock
        case closeDescriptors = "closing descriptors"
        /// The seccomp filter that keeps the program from giving files the guarded group.
        case groupGuard = "group guard"
        case resourceLimits = "resource limits"
        /// `openAsUser`'s open of the program as the user.
        case open
        case exec

        init(code: CInt) {
            switch code {
            case CInt(DEVACCESS_SPAWN_PIPE.rawValue): self = .pipe
            case CInt(DEVACCESS_SPAWN_FORK.rawValue): self = .fork
            case CInt(DEVACCESS_SPAWN_PIDFD.rawValue): self = .pidfd
            case CInt(DEVACCESS_SPAWN_SIGNALS.rawValue): self = .signals
            case CInt(DEVACCESS_SPAWN_PROCESS_GROUP.rawValue): self = .processGroup
            case CInt(DEVACCESS_SPAWN_STREAMS.rawValue): self = .standardStreams
            case CInt(DEVACCESS_SPAWN_SETGROUPS.rawValue): self = .setgroups
            case CInt(DEVACCESS_SPAWN_SETGID.rawValue): self = .setgid
            case CInt(DEVACCESS_SPAWN_SETUID.rawValue): self = .setuid
            case CInt(DEVACCESS_SPAWN_PRIVILEGES_KEPT.rawValue): self = .privilegesKept
            case CInt(DEVACCESS_SPAWN_CHDIR.rawValue): self = .chdir
            case CInt(DEVACCESS_SPAWN_NO_NEW_PRIVS.rawValue): self = .noNewPrivileges
            case CInt(DEVACCESS_SPAWN_LANDLOCK.rawValue): self = .landlock
            case CInt(DEVACCESS_SPAWN_CLOSE_FDS.rawValue): self = .closeDescriptors
            case CInt(DEVACCESS_SPAWN_EXEC.rawValue): self = .exec
            case CInt(DEVACCESS_SPAWN_GROUP_GUARD.rawValue): self = .groupGuard
            case CInt(DEVACCESS_SPAWN_LIMITS.rawValue): self = .resourceLimits
            case CInt(DEVACCESS_SPAWN_OPEN.rawValue): self = .open
            default: self = .report
            }
        }
    }

    public var step: Step
    public var errno: Errno
    public var executable: String
    public var workingDirectory: String
    public var uid: UInt32
    public var gid: UInt32
    /// For `.arguments`: what is wrong.
    public var detail: String?

    public var description: String {
        let program = executable
        let user = "uid \(uid)"
        switch (step, errno.rawValue) {
        case (.arguments, _):
            return "\(program): cannot be started: \(detail ?? errno.message)"
        case (.exec, ENOENT):
            return "\(program): no such file (give the full path of an installed program;"
                + " for a script, its #! interpreter must exist too)"
        case (.exec, EACCES):
            return "\(program): permission denied: \(user) may not execute it (it must be a regular file with"
                + " execute permission, on a filesystem not mounted noexec, in directories \(user) may search)"
        case (.exec, ENOEXEC):
            return "\(program): not a program this machine can run (no #! line, or built for another architecture)"
        case (.exec, E2BIG):
            return "\(program): the arguments and environment are too long together; pass fewer or shorter ones"
        case (.exec, ETXTBSY):
            return "\(program): the file is open for writing (being installed?); try again when that is done"
        case (.exec, ENOTDIR), (.exec, ELOOP):
            return "\(program): \(errno.message) (check the path: a component is not a directory, or symlinks loop)"
        case (.chdir, ENOENT):
            return "the working directory \(workingDirectory) does not exist (any more); cd to a directory that"
                + " exists and run again"
        case (.chdir, EACCES):
            return "\(user) may not enter the working directory \(workingDirectory); cd to a directory you can"
                + " enter and run again"
        case (.chdir, _):
            return "cannot enter the working directory \(workingDirectory): \(errno.message)"
        case (.setgroups, EINVAL):
            return "\(program): too many supplementary groups for the kernel; leave some groups and run again"
        case (.setgroups, _), (.setgid, _), (.setuid, _):
            return "\(program): could not switch to \(user) gid \(gid) (\(step.rawValue): \(errno.message));"
                + " devaccessd must run as root with CAP_SETUID and CAP_SETGID"
        case (.privilegesKept, _):
            return "\(program): after switching to \(user) the process could still become root again;"
                + " refused to start it (check devaccessd's securebits and capabilities)"
        case (.noNewPrivileges, _), (.landlock, _):
            return "\(program): could not confine it with Landlock (\(step.rawValue): \(errno.message));"
                + " run without --strict, or on a kernel with Landlock enabled"
        case (.standardStreams, EBADF):
            return "\(program): the standard input, output or error passed is not an open descriptor"
        case (.fork, EAGAIN):
            return "\(program): cannot start a process now (process limit reached); try again later"
        case (.pidfd, EMFILE), (.pipe, EMFILE), (.standardStreams, EMFILE):
            return "\(program): out of file descriptors; try again later"
        default:
            return "\(program): starting it failed at \(step.rawValue): \(errno.message)"
        }
    }
}

/// Starts programs as another user: fork, set up the child (signals, process group, standard
/// streams, umask, groups, gid, uid, working directory, optional Landlock, no other
/// descriptors) and exec; all of it in C (CSpawn), where the child makes only
/// async-signal-safe calls. Returns once the exec succeeded, or throws the failed step.
public enum ProgramLauncher {
    /// Starts the program; returns once its exec succeeded.
    public static func launch(_ spec: LaunchSpec) throws(LaunchError) -> LaunchedProcess {
        var result = devaccess_spawn_result()
        try withRequest(spec) { request in devaccess_spawn(&request, &result) == 0 ? nil : result }
        return LaunchedProcess(pid: result.pid, pidfd: result.pidfd >= 0 ? result.pidfd : nil)
    }

    /// Forks and sets the program up, and holds it before exec (see `HeldLaunch`); throws
    /// what failed in the setup (the child is reaped then).
    public static func hold(_ spec: LaunchSpec) throws(LaunchError) -> HeldLaunch {
        var result = devaccess_spawn_result()
        var held = devaccess_spawn_held()
        try withRequest(spec) { request in devaccess_spawn_start(&request, &held, &result) == 0 ? nil : result }
        return HeldLaunch(child: held, template: error(spec, .exec, Errno(rawValue: 0)))
    }

    private static func error(_ spec: LaunchSpec, _ step: LaunchError.Step, _ errno: Errno,
                              _ detail: String? = nil) -> LaunchError {
        LaunchError(step: step, errno: errno, executable: spec.executable, workingDirectory: spec.workingDirectory,
                    uid: spec.uid, gid: spec.gid, detail: detail)
    }

    /// Checks the spec, builds the C request (everything before fork) and runs `body` with
    /// it; `body` returns the C result of a failure, or nil.
    private static func withRequest(_ spec: LaunchSpec,
                                    _ body: (inout devaccess_spawn_request) -> devaccess_spawn_result?) throws(LaunchError) {
        if let problem = problem(in: spec) { throw error(spec, .arguments, Errno(rawValue: EINVAL), problem) }

        // A copy of the ruleset's descriptor that lives for this launch: the ruleset may be
        // closed by another thread meanwhile without the child restricting itself with
        // whatever then got that number.
        var rulesetFD: CInt = -1
        if let landlock = spec.landlock {
            rulesetFD = landlock.duplicateDescriptor()
            guard rulesetFD >= 0 else {
                throw error(spec, .landlock, Errno(rawValue: EBADF), "the Landlock ruleset was closed, or out of descriptors")
            }
        }
        defer { if rulesetFD >= 0 { close(rulesetFD) } }

        guard let argv = CStringArray(spec.arguments), let envp = CStringArray(spec.environment) else {
            throw error(spec, .arguments, Errno(rawValue: ENOMEM), "out of memory")
        }
        let failure = spec.executable.withCString { path in
            spec.workingDirectory.withCString { cwd in
                spec.supplementaryGroups.withUnsafeBufferPointer { groups in
                    spec.resourceLimits.map { devaccess_spawn_limit(resource: $0.resource, soft: $0.soft, hard: $0.hard) }
                        .withUnsafeBufferPointer { limits in
                    argv.withPointer { argvPointer in
                        envp.withPointer { envpPointer in
                            var request = devaccess_spawn_request()
                            request.path = path
                            if let descriptor = spec.executableDescriptor {
                                request.exec_by_fd = 1
                                request.exec_fd = descriptor
                            }
                            request.argv = argvPointer
                            request.envp = envpPointer
                            request.cwd = cwd
                            request.fds = (spec.standardInput, spec.standardOutput, spec.standardError)
                            request.uid = spec.uid
                            request.gid = spec.gid
                            request.groups = groups.baseAddress
                            request.group_count = groups.count
                            request.umask = spec.umask
                            request.landlock_ruleset_fd = rulesetFD
                            if let guarded = spec.guardedGroup {
                                request.guard_group = 1
                                request.guarded_gid = guarded
                            }
                            request.limits = limits.baseAddress
                            request.limit_count = limits.count
                            return body(&request)
                        }
                        }
                    }
                }
            }
        }
        if let failure {
            throw error(spec, LaunchError.Step(code: failure.step), Errno(rawValue: failure.error))
        }
    }

    /// What cannot be handed to execve as asked, in words; nil when all is well.
    static func problem(in spec: LaunchSpec) -> String? {
        if spec.executable.isEmpty { return "no program path given" }
        if !spec.executable.hasPrefix("/") { return "the program path must be absolute" }
        if spec.arguments.isEmpty { return "no arguments: argv[0] is required" }
        if !spec.workingDirectory.hasPrefix("/") { return "the working directory must be an absolute path" }
        // A C string ends at the first NUL: the program would get something else than asked.
        if spec.executable.utf8.contains(0) || spec.workingDirectory.utf8.contains(0) {
            return "a path contains a NUL byte"
        }
        if spec.arguments.contains(where: { $0.utf8.contains(0) }) { return "an argument contains a NUL byte" }
        if let bad = spec.environment.first(where: { $0.utf8.contains(0) || !$0.contains("=") }) {
            return bad.utf8.contains(0) ? "an environment entry contains a NUL byte"
                : "an environment entry has no '=' (clean it with LaunchEnvironment.clean)"
        }
        // (uid_t)-1 means "unchanged" to the set*id family.
        if spec.uid == UInt32.max || spec.gid == UInt32.max || spec.supplementaryGroups.contains(UInt32.max) {
            return "uid or gid 4294967295 ((uid_t)-1) is not an id"
        }
        for fd in [spec.standardInput, spec.standardOutput, spec.standardError] where fcntl(fd, F_GETFD) < 0 {
            return "descriptor \(fd) (standard input, output or error) is not open"
        }
        if let fd = spec.executableDescriptor, fcntl(fd, F_GETFD) < 0 { return "the program's descriptor \(fd) is not open" }
        return nil
    }

    /// Opens `path` (`O_PATH`: no device opened, nothing read) as the user, in a child of its
    /// own that takes exactly these ids and enters `directory` first (a relative path is
    /// the user's relative to it); devaccessd's threads never change ids. Returns the
    /// descriptor, close-on-exec, which the caller owns. What the user may not open fails
    /// with `.refused` and the errno the user got, which tells them nothing they could not
    /// learn by trying themselves.
    public static func openAsUser(_ path: String, directory: String, uid: UInt32, gid: UInt32,
                                  groups: [UInt32], timeout: Duration = .seconds(2)) throws(UserOpenError) -> CInt {
        if path.isEmpty || path.utf8.contains(0) || directory.utf8.contains(0) || uid == .max || gid == .max {
            throw .refused(Errno(rawValue: EINVAL))
        }
        var fd: CInt = -1
        var result = devaccess_spawn_result()
        let milliseconds = CInt(clamping: timeout.components.seconds * 1000)
        let rc = path.withCString { cPath in
            directory.withCString { cwd in
                groups.withUnsafeBufferPointer { list in
                    var request = devaccess_open_request(path: cPath, cwd: directory.isEmpty ? nil : cwd, uid: uid,
                                                         gid: gid, groups: list.baseAddress, group_count: list.count,
                                                         timeout_ms: milliseconds)
                    return devaccess_open_as(&request, &fd, &result)
                }
            }
        }
        guard rc != 0 else { return fd }
        let error = Errno(rawValue: result.error)
        switch result.step {
        case CInt(DEVACCESS_SPAWN_OPEN.rawValue): throw .refused(error)
        case CInt(DEVACCESS_SPAWN_CHDIR.rawValue): throw .directory(error)
        default: throw .failed(LaunchError.Step(code: result.step), error)
        }
    }
}

/// Why `ProgramLauncher.openAsUser` returned no descriptor.
public enum UserOpenError: Error, Equatable, Sendable {
    /// The user may not open the path, or it names nothing: the errno the user got.
    case refused(Errno)
    /// The user may not enter the directory the path is relative to.
    case directory(Errno)
    /// devaccessd's part failed (fork, switching ids, the child's report; ETIMEDOUT: the
    /// child did not answer in time and was killed).
    case failed(LaunchError.Step, Errno)
}

/// A NULL-terminated array of C strings for execve, owned here and freed on deinit.
private struct CStringArray: ~Copyable {
    private let pointers: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
    private let count: Int

    /// nil when memory ran out.
    init?(_ strings: [String]) {
        var copies: [UnsafeMutablePointer<CChar>] = []
        copies.reserveCapacity(strings.count)
        for string in strings {
            guard let copy = strdup(string) else {
                copies.forEach { free($0) }
                return nil
            }
            copies.append(copy)
        }
        count = copies.count
        pointers = .allocate(capacity: count + 1)
        for (index, copy) in copies.enumerated() { (pointers + index).initialize(to: copy) }
        (pointers + count).initialize(to: nil)
    }

    func withPointer<R>(_ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        body(UnsafePointer(pointers))
    }

    deinit {
        for index in 0..<count { free(pointers[index]) }
        pointers.deallocate()
    }
}

/// One resource limit, as setrlimit(2) takes it.
public struct ResourceLimit: Sendable, Hashable {
    public var resource: Int32
    public var soft: UInt64
    public var hard: UInt64

    public init(resource: Int32, soft: UInt64, hard: UInt64) {
        self.resource = resource
        self.soft = soft
        self.hard = hard
    }

    /// /proc/PID/limits' names, in RLIMIT_* order (RLIMIT_CPU = 0 ... RLIMIT_RTTIME = 15).
    static let names = ["Max cpu time", "Max file size", "Max data size", "Max stack size", "Max core file size",
                        "Max resident set", "Max processes", "Max open files", "Max locked memory",
                        "Max address space", "Max file locks", "Max pending signals", "Max msgqueue size",
                        "Max nice priority", "Max realtime priority", "Max realtime timeout"]

    /// The limits `process` runs under now, from its limits file (readable without
    /// CAP_SYS_RESOURCE, which prlimit(2) on another user's process needs): what a program it
    /// would have started itself gets (pam_limits' settings, `ulimit`). Read through the
    /// directory pinned to that process: once it is gone this fails (ESRCH), never reading
    /// whatever process got its pid since.
    public static func of(_ process: PinnedProcess) -> Result<[ResourceLimit], Errno> {
        guard let bytes = process.read("limits") else { return .failure(Errno(rawValue: ESRCH)) }
        return parse(String(decoding: bytes, as: UTF8.self)).map { .success($0) } ?? .failure(Errno(rawValue: EINVAL))
    }

    /// Each line: the name (padded to 26 columns), soft, hard, units. nil when a limit is missing.
    static func parse(_ text: String) -> [ResourceLimit]? {
        var found: [Int32: ResourceLimit] = [:]
        for line in text.split(separator: "\n") {
            guard let index = names.firstIndex(where: { line.hasPrefix($0 + " ") }) else { continue }
            let words = line.dropFirst(names[index].count).split(separator: " ")
            guard words.count >= 2, let soft = value(words[0]), let hard = value(words[1]) else { return nil }
            found[Int32(index)] = ResourceLimit(resource: Int32(index), soft: soft, hard: hard)
        }
        guard found.count == names.count else { return nil }
        return (0..<Int32(names.count)).compactMap { found[$0] }
    }

    private static func value(_ word: Substring) -> UInt64? {
        word == "unlimited" ? UInt64.max : UInt64(word)
    }
}
