import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import Foundation
import Glibc
import Testing
import DevAccessLaunch

/// `devaccess run`'s launcher against the kernel: a real user, a real run group, real device
/// nodes and ACLs; what the child sees is read from the child itself or from /proc.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users, device nodes and ACLs, switches ids"))
struct ProgramLauncherTests {
    let user: TestUser
    let crew: TestGroup
    let runGroup: UInt32
    let directory: TemporaryDirectory
    let launch: Launch

    init() throws {
        user = try TestUser("run")
        crew = try TestGroup("runcrew", members: [user])
        runGroup = testRunGroup()
        directory = try TemporaryDirectory()
        launch = Launch(user: user, groups: [user.gid, crew.gid, runGroup])
    }

    // MARK: - Identity

    @Test func runsAsTheUserWithItsGroupsAndTheRunGroup() throws {
        let id = try launch.run("/usr/bin/id", ["id"])
        #expect(id.status == .exited(0), "\(id.errors)")
        // uid=U(name) gid=G(nogroup) groups=G(nogroup),C(crew),R
        #expect(id.output.hasPrefix("uid=\(user.uid)(\(user.name)) gid=\(user.gid)("), "\(id.output)")
        let groups = id.output.split(separator: "groups=").last.map { list in
            Set(list.split(separator: ",").compactMap { UInt32($0.prefix { $0.isNumber }) })
        }
        #expect(groups == [user.gid, crew.gid, runGroup], "\(id.output)")
    }

    @Test func theProgramCannotGetRootBack() throws {
        let probe = try launch.python("""
            import os, sys
            print(*os.getresuid(), *os.getresgid())
            try:
                os.setuid(0); print("setuid(0) worked")
            except PermissionError:
                print("EPERM")
            try:
                os.setgroups([0]); print("setgroups worked")
            except PermissionError:
                print("EPERM")
            for line in open("/proc/self/status"):
                if line.startswith(("CapPrm", "CapEff", "CapAmb")): print(line.split()[1])
            """)
        let lines = probe.output.split(separator: "\n").map(String.init)
        let ids = "\(user.uid) \(user.uid) \(user.uid) \(user.gid) \(user.gid) \(user.gid)"
        #expect(lines == [ids, "EPERM", "EPERM", "0000000000000000", "0000000000000000", "0000000000000000"],
                "\(probe.output)\(probe.errors)")
    }

    /// The run group is what opens the node: the same user without it gets EACCES.
    @Test func theRunGroupOpensANodeItsACLNames() throws {
        let node = try directory.makeNullNode("camera")
        try TestProcess.setup("setfacl", ["-m", "g:\(runGroup):rw", node])
        let open = """
            import os, sys, errno
            try:
                os.close(os.open(sys.argv[1], os.O_WRONLY)); print("opened")
            except OSError as e:
                print(errno.errorcode[e.errno])
            """
        let with = try launch.python(open, [node])
        #expect(with.output == "opened\n", "\(with.errors)")
        var without = launch
        without.groups = [user.gid, crew.gid]
        let refused = try without.python(open, [node])
        #expect(refused.output == "EACCES\n", "\(refused.errors)")
    }

    // MARK: - What the program gets

    @Test func argumentsAndEnvironmentArriveByteExact() throws {
        let arguments = ["argv0 with space", "-c", "cat /proc/$$/cmdline; printf '<SEP>'; cat /proc/$$/environ",
                         "a b", "", "line1\nline2", "tab\there", "ünïcödé ✓", "'\"$HOME`x`\\", " "]
        var custom = launch
        custom.environment = ["PATH=/usr/bin:/bin", "SPACES=a  b", "NEWLINE=x\ny", "EMPTY=", "EQUALS=a=b=c", "Ü=ü"]
        let result = try custom.run("/bin/sh", arguments)
        #expect(result.status == .exited(0), "\(result.errors)")
        let expected = arguments.flatMap { Array($0.utf8) + [0] } + Array("<SEP>".utf8)
            + custom.environment.flatMap { Array($0.utf8) + [0] }
        #expect(result.stdout == expected)
    }

    @Test func workingDirectoryAndUmask() throws {
        var inside = launch
        inside.workingDirectory = directory.path
        let result = try inside.run("/bin/sh", ["sh", "-c", "pwd -P; umask"])
        #expect(result.output == "\(directory.path)\n0022\n", "\(result.errors)")
    }

    @Test func aMissingWorkingDirectoryIsAChdirError() throws {
        var missing = launch
        missing.workingDirectory = directory.path + "/gone"
        let error = try #require(throws: LaunchError.self) { try missing.run("/bin/true", ["true"]) }
        #expect(error.step == .chdir && error.errno == .noSuchFile)
        #expect(error.description.contains("does not exist"), "\(error)")
    }

    /// chdir happens as the user: root could enter a directory the user cannot reach and
    /// leave the program below it.
    @Test func theWorkingDirectoryIsEnteredAsTheUser() throws {
        let locked = directory.path + "/locked"
        let inner = locked + "/inner"
        #expect(mkdir(locked, 0o700) == 0 && mkdir(inner, 0o755) == 0)
        var hidden = launch
        hidden.workingDirectory = inner
        let error = try #require(throws: LaunchError.self) { try hidden.run("/bin/true", ["true"]) }
        #expect(error.step == .chdir && error.errno == .permissionDenied, "\(error)")
        #expect(error.description.contains("may not enter"), "\(error)")
    }

    @Test func aMissingProgramIsAnExecError() throws {
        let error = try #require(throws: LaunchError.self) { try launch.run("/usr/bin/no-such-program", ["x"]) }
        #expect(error.step == .exec && error.errno == .noSuchFile)
        #expect(error.description == "/usr/bin/no-such-program: no such file (give the full path of an installed"
                + " program; for a script, its #! interpreter must exist too)")
    }

    @Test func aFileThatIsNotExecutableIsPermissionDenied() throws {
        let script = directory.path + "/script"
        #expect(FileManager.default.createFile(atPath: script, contents: Data("#!/bin/sh\nexit 0\n".utf8),
                                               attributes: [.posixPermissions: 0o644]))
        let error = try #require(throws: LaunchError.self) { try launch.run(script, ["script"]) }
        #expect(error.step == .exec && error.errno == .permissionDenied)
        #expect(error.description.contains("uid \(user.uid) may not execute it"), "\(error)")
    }

    @Test func whatCannotBePassedIsRefusedBeforeFork() throws {
        for (executable, arguments, environment) in [("bin/true", ["true"], [String]()), ("/bin/true", [], []),
                                                     ("/bin/true", ["a\0b"], []), ("/bin/true", ["true"], ["NOEQUALS"])] {
            var odd = launch
            odd.environment = environment
            let error = try #require(throws: LaunchError.self) { try odd.run(executable, arguments) }
            #expect(error.step == .arguments, "\(error)")
        }
    }

    // MARK: - Descriptors

    /// Descriptors the parent left without close-on-exec do not reach the program.
    @Test func theProgramHasExactlyItsThreeStreams() throws {
        let leaked = open("/dev/null", O_RDONLY)
        let high = fcntl(leaked, F_DUPFD, 300)
        defer {
            close(leaked)
            close(high)
        }
        #expect(leaked >= 0 && high >= 300 && fcntl(high, F_GETFD) & FD_CLOEXEC == 0)
        let running = try launch.start("/bin/cat", ["cat"])
        // cat blocks reading stdin: its descriptors are the launch's, not cat's own files.
        #expect(try openDescriptors(of: running.process.pid) == [0, 1, 2])
        let targets = try (0...2).map { try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(running.process.pid)/fd/\($0)") }
        #expect(targets.allSatisfy { $0.hasPrefix("pipe:") } && Set(targets).count == 3, "\(targets)")
        #expect(try running.finish().status == .exited(0))
    }

    @Test func standardStreamsAreByteExact() throws {
        let data = (0..<4).flatMap { _ in (0...255).map(UInt8.init) }
        // (Not `tee /dev/stderr`: reopening the root-owned pipe through /proc is refused to the user.)
        let copy = "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); sys.stderr.buffer.write(d)"
        let result = try launch.run("/usr/bin/python3", ["python3", "-c", copy], input: data)
        #expect(result.status == .exited(0))
        #expect(result.stdout == data)
        #expect(result.stderr == data)
    }

    /// Given descriptors that coincide and that already are 0-2 in the parent: stdout and
    /// stderr both given as the parent's fd 0 (a pipe here). Naive dup2s in order would make
    /// the child's stdout its stdin.
    @Test func givenDescriptorsMayCoincideAndBeZeroToTwo() throws {
        let input = try TestPipe(), output = try TestPipe()
        let saved = dup(0)
        #expect(saved >= 0)
        #expect(dup2(output.writeEnd, 0) == 0)
        let process: LaunchedProcess
        do {
            process = try ProgramLauncher.launch(launch.spec("/bin/sh", ["sh", "-c", "cat; echo err >&2"],
                                                             stdin: input.readEnd, stdout: 0, stderr: 0))
        } catch {
            dup2(saved, 0)
            close(saved)
            throw error
        }
        dup2(saved, 0)
        close(saved)
        input.closeRead()
        output.closeWrite()
        try input.write(Array("hello\n".utf8))
        input.closeWrite()
        // A fixed length, not EOF: another test's child may have inherited fd 0 meanwhile.
        let expected = Array("hello\nerr\n".utf8)
        #expect(try output.read(upTo: expected.count) == expected)
        #expect(try process.wait() == .exited(0))
    }

    // MARK: - Signals, process group, exit

    /// Whatever the broker ignores or blocks, the program starts with default dispositions,
    /// an empty mask, and a process group of its own in the broker's session.
    @Test func signalsAreDefaultAndTheProgramLeadsItsOwnGroup() throws {
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        var previous = sigaction()
        #expect(sigaction(SIGINT, &ignore, &previous) == 0)
        var block = sigset_t(), oldMask = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGUSR1)
        sigaddset(&block, SIGTERM)
        #expect(pthread_sigmask(SIG_BLOCK, &block, &oldMask) == 0)
        let ownIgnored = try statusField("SigIgn", of: getpid())
        let running: Running
        do {
            running = try launch.start("/bin/cat", ["cat"])
        } catch {
            pthread_sigmask(SIG_SETMASK, &oldMask, nil)
            sigaction(SIGINT, &previous, nil)
            throw error
        }
        pthread_sigmask(SIG_SETMASK, &oldMask, nil)
        sigaction(SIGINT, &previous, nil)
        let pid = running.process.pid
        #expect(ownIgnored != "0000000000000000", "the test process should ignore SIGINT here")
        let ignored = try statusField("SigIgn", of: pid)
        #expect(ignored == "0000000000000000", "SigIgn \(ignored), exe \((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? "?")")
        #expect(try statusField("SigBlk", of: pid) == "0000000000000000")
        #expect(try statusField("NSpgid", of: pid) == String(pid))
        #expect(try statusField("NSsid", of: pid) == String(getsid(0)))
        #expect(try running.finish().status == .exited(0))
    }

    @Test(arguments: [0, 1, 42] as [Int32])
    func exitStatuses(_ code: Int32) throws {
        let result = try launch.run("/bin/sh", ["sh", "-c", "exit \(code)"])
        #expect(result.status == .exited(code))
        #expect(result.status.shellStatus == code)
    }

    @Test func deathBySignalAndThePidfd() throws {
        let running = try launch.start("/bin/cat", ["cat"])
        let pidfd = running.process.pidfd ?? -1
        #expect(pidfd >= 0, "this kernel has pidfd_open")
        var poller = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&poller, 1, 0) == 0, "readable before the program ended")
        #expect(kill(running.process.pid, SIGTERM) == 0)
        #expect(poll(&poller, 1, 20_000) == 1 && poller.revents & Int16(POLLIN) != 0)
        let status = try running.process.wait()
        #expect(status == .signaled(SIGTERM, coreDumped: false))
        #expect(status.shellStatus == 143)
        // Reaped once; asking again answers from what was seen (no second waitid).
        #expect(try running.process.wait() == status && running.process.exitStatusIfEnded() == status)
    }

    @Test func thePidfdBecomesReadableWhenTheProgramExits() throws {
        let running = try launch.start("/bin/cat", ["cat"])
        let pidfd = running.process.pidfd ?? -1
        #expect(pidfd >= 0, "this kernel has pidfd_open")
        var poller = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&poller, 1, 0) == 0)
        #expect(try running.process.exitStatusIfEnded() == nil)
        running.stdin.closeWrite()
        #expect(poll(&poller, 1, 20_000) == 1)
        #expect(try running.process.exitStatusIfEnded() == .exited(0))
    }

    // MARK: - Environment

    @Test func aCleanedEnvironmentReachesTheProgramWithoutLoaderVariables() throws {
        let given = ["LD_PRELOAD=/nonexistent.so", "HOME=/home/x", "TERM=xterm-256color", "LANG=C.UTF-8",
                     "DISPLAY=:0", "XDG_RUNTIME_DIR=/run/user/1000", "GST_PLUGIN_PATH=/tmp/evil",
                     "PYTHONPATH=/tmp/evil", "BASH_FUNC_id%%=() { echo pwned; }", "PATH=/usr/bin:/bin"]
        // Without cleaning, the loader really acts on LD_PRELOAD: the attack is real.
        var raw = launch
        raw.environment = given
        let dirty = try raw.run("/usr/bin/env", ["env"])
        #expect(dirty.errors.contains("/nonexistent.so"), "\(dirty.errors)")
        var cleaned = launch
        cleaned.environment = LaunchEnvironment.clean(given, uid: 1000).kept
        let clean = try cleaned.run("/usr/bin/env", ["env"])
        #expect(clean.errors.isEmpty, "\(clean.errors)")
        #expect(clean.output.split(separator: "\n").map(String.init)
                == ["HOME=/home/x", "TERM=xterm-256color", "LANG=C.UTF-8", "DISPLAY=:0",
                    "XDG_RUNTIME_DIR=/run/user/1000", "PATH=/usr/bin:/bin"])
    }

    // MARK: - The program as its user opened it (issue 27)

    /// The open happens in a child with the user's ids, never on this process's threads: a
    /// directory only root may enter refuses it the same way whatever exists there.
    @Test func openingAsTheUserIsRefusedWhereTheUserCannotReach() throws {
        let secret = directory.path + "/secret"
        #expect(mkdir(secret, 0o700) == 0)
        try Data("x".utf8).write(to: URL(fileURLWithPath: secret + "/present"))
        for name in ["present", "absent"] {
            #expect(throws: UserOpenError.refused(Errno(rawValue: EACCES))) {
                try ProgramLauncher.openAsUser(secret + "/" + name, directory: "/", uid: user.uid, gid: user.gid,
                                               groups: launch.groups)
            }
        }
        #expect(throws: UserOpenError.directory(Errno(rawValue: EACCES))) {
            try ProgramLauncher.openAsUser("present", directory: secret, uid: user.uid, gid: user.gid, groups: launch.groups)
        }
        // Root opens it, and this process is root still: no thread of it changed ids.
        let root = try ProgramLauncher.openAsUser("present", directory: secret, uid: 0, gid: 0, groups: [])
        close(root)
        #expect(getuid() == 0 && geteuid() == 0 && getegid() == 0)
    }

    /// The child executes the descriptor, not the path: a #! script with another file renamed
    /// over its path since it was opened still runs, as itself.
    @Test func theOpenedFileRunsWhateverItsPathNamesNow() throws {
        let path = directory.path + "/tool"
        for (file, word) in [(path, "first"), (path + ".new", "second")] {
            try Data("#!/bin/sh\necho \(word) \"$@\"\n".utf8).write(to: URL(fileURLWithPath: file))
            #expect(chmod(file, 0o755) == 0)
        }
        let opened = try ProgramLauncher.openAsUser(path, directory: "/", uid: user.uid, gid: user.gid, groups: launch.groups)
        defer { close(opened) }
        #expect(rename(path + ".new", path) == 0)
        let input = try TestPipe(), output = try TestPipe(), errors = try TestPipe()
        var spec = launch.spec(path, ["tool", "arg"], stdin: input.readEnd, stdout: output.writeEnd, stderr: errors.writeEnd)
        spec.executableDescriptor = opened
        let process = try ProgramLauncher.launch(spec)
        input.closeRead()
        output.closeWrite()
        errors.closeWrite()
        let done = try Running(process: process, stdin: input, stdout: output, stderr: errors).finish()
        #expect(done.status == .exited(0) && done.output == "first arg\n", "\(done.output) \(done.errors)")
    }

    // MARK: - Limits

    /// A process's limits are read through its /proc directory pinned while it lived: once it
    /// is gone the read fails, even after its pid went to another process (ns_last_pid makes
    /// that happen here), never returning that process's limits.
    @Test func limitsAreReadThroughThePinnedDirectoryAndFailOnceTheProcessIsGone() throws {
        func start(_ limit: Int) throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = ["--nproc=\(limit):\(limit)", "/bin/sleep", "30"]
            try process.run()
            return process
        }
        // SIGKILL: this process may have SIGTERM ignored, and children inherit that.
        func end(_ process: Process) {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let first = try start(321)
        let pinned = try #require(PinnedProcess(pid: first.processIdentifier))
        func nproc() -> UInt64? {
            guard case .success(let limits) = ResourceLimit.of(pinned) else { return nil }
            return limits.first { $0.resource == 6 }?.hard   // RLIMIT_NPROC
        }
        var waited = 0
        while nproc() != 321 && waited < 500 {   // prlimit sets it before it execs sleep
            usleep(10_000)
            waited += 1
        }
        #expect(nproc() == 321)
        end(first)
        var reused: Process?
        for _ in 0..<200 where reused == nil {
            let next = open("/proc/sys/kernel/ns_last_pid", O_WRONLY)
            _ = Array(String(pinned.pid - 1).utf8).withUnsafeBytes { write(next, $0.baseAddress, $0.count) }
            close(next)
            let candidate = try start(777)
            if candidate.processIdentifier == pinned.pid { reused = candidate } else { end(candidate) }
        }
        defer { if let reused { end(reused) } }
        #expect(reused != nil, "pid \(pinned.pid) was not reused: the read below is checked on a free pid only")
        guard case .failure(let error) = ResourceLimit.of(pinned) else {
            Issue.record("the limits of a process that is gone were read: \(ResourceLimit.of(pinned))")
            return
        }
        #expect(error.rawValue == ESRCH)
    }
}
