import Foundation
import Glibc
import Synchronization
import Testing
import DevAccessTestSupport

/// The login-terminal harness gives a session what the broker will check before writing a
/// consent prompt onto a terminal: a PAM login session (audit sessionid, loginuid), a pty
/// as controlling terminal, a utmp record for the login shell under root's login, no TIOCSTI.
/// Every test that logs a user in runs inside `LoginSessions`: they change machine-wide
/// settings (/run/utmp, dev.tty.legacy_tiocsti), so they run one at a time.
@Suite(.serialized, .enabled(if: getuid() == 0, "runs login -f, changes /run/utmp and dev.tty.legacy_tiocsti"))
struct LoginSessions {}

extension LoginSessions {
    @Suite
    struct LoginTerminalHarnessTests {
        @Test func theShellHasALoginSessionAndThePtyAsItsTerminal() throws {
            let user = try TestUser("lgsess", shell: "/bin/sh")
            // sessionid and loginuid end without a newline.
            let run = try LoginTerminal.run(user: user, command: [
                "/bin/sh", "-c", #"cat /proc/self/sessionid; echo; cat /proc/self/loginuid; echo; tty; stat -c %u "$(tty)""#,
            ])
            #expect(run.exitStatus == 0)
            let lines = run.commandOutput.split(separator: "\n").map(String.init)
            try #require(lines.count == 4, "\(run.output)")
            let sessionID = UInt32(lines[0])
            #expect(sessionID != nil)
            #expect(sessionID != UInt32.max, "no audit session: pam_loginuid did not run")
            #expect(lines[0] != Self.ownSessionID, "the session is the test runner's own")
            #expect(lines[1] == String(user.uid))
            #expect(lines[2].wholeMatch(of: /\/dev\/pts\/[0-9]+/) != nil)
            #expect(lines[2] == run.tty)
            #expect(lines[3] == String(user.uid), "login gives the terminal to the user")
            #expect(!run.output.contains("\r"))
            #expect(!run.output.contains("No directory"), "the user has a home")
        }

        /// utmp read from here with `utmpdump` (as root, as the broker will): a user in the
        /// session could read utmp too, but not /proc/PID/exe of root's login. Debian 12's login
        /// (shadow) writes the record from its child, so ut_pid is the user's login shell; the
        /// shell's parent is root's login.
        @Test func utmpRecordsTheLoginShellUnderRootsLogin() throws {
            let before = MachineState()
            var name = ""
            var home: String?
            do {
                let user = try TestUser("lgutmp", shell: "/bin/sh")
                name = user.name
                home = user.home
                let settings = try TerminalSettings(legacyTIOCSTI: nil)
                defer { settings.restore() }
                #expect(access(TerminalSettings.utmpPath, R_OK) == 0)
                let directory = try TemporaryDirectory()
                let go = directory.path + "/go"
                // Prints its sessionid and the login shell's pid (the harness's wrapper sh is
                // the parent), then waits for the checks below.
                let session = Background {
                    try LoginTerminal.run(user: user, command: [
                        "/bin/sh", "-c", #"cat /proc/self/sessionid; echo; awk '/^PPid:/ { print $2 }' "/proc/$PPID/status"; "#
                            + #"while [ ! -e "$1" ]; do sleep 0.1; done"#, "sh", go,
                    ])
                }
                // Ends the session however the checks below end, before the user and `go` go.
                defer {
                    _ = FileManager.default.createFile(atPath: go, contents: nil)
                    _ = try? session.wait()
                }
                let record = try #require(try Self.waitForUserProcess(name), "no USER_PROCESS record for \(name)")
                let shellPID = try #require(pid_t(record.pid))
                // Debian's login writes the record from its child before that child executes the
                // shell: on a loaded machine the record can be read while the child is still login.
                var shell = Self.processInfo(shellPID)
                let execDeadline = Date().addingTimeInterval(10)
                while shell.exe == "/usr/bin/login" && Date() < execDeadline {
                    usleep(20_000)
                    shell = Self.processInfo(shellPID)
                }
                let loginPID = try #require(shell.parent)
                let login = Self.processInfo(loginPID)
                let shellSID = getsid(shellPID)
                _ = FileManager.default.createFile(atPath: go, contents: nil)
                let run = try session.wait()

                #expect(run.exitStatus == 0, "\(run.output)")
                let lines = run.commandOutput.split(separator: "\n").map(String.init)
                try #require(lines.count == 2, "\(run.output)")
                #expect(record.line == run.tty.map { String($0.dropFirst("/dev/".count)) })
                #expect(String(shellPID) == lines[1], "ut_pid is not the login shell")
                #expect(shell.uid == user.uid)
                #expect(shell.exe == DaemonTests.realPath(user.shell))
                #expect(shell.sessionID == lines[0])
                #expect(loginPID == run.loginPID)
                #expect(login.uid == 0)
                #expect(login.exe == "/usr/bin/login")
                #expect(login.sessionID == lines[0])
                #expect(shellSID == loginPID, "login leads the terminal's session")
                // The harness marks the record dead after logout.
                #expect(try Self.utmpRecords().contains { $0.type == "7" && $0.user == name } == false)
                settings.restore()
            }
            #expect(MachineState() == before)
            #expect(getpwnam(name) == nil)
            #expect(home.map { access($0, F_OK) != 0 } == true)
        }

        @Test func typedAnswersReachTheCommandInOrder() throws {
            let user = try TestUser("lgans", shell: "/bin/sh")
            let prompt = #"printf "Answer: "; read x; echo "got=$x""#
            let hello = try LoginTerminal.run(user: user, command: ["/bin/sh", "-c", prompt],
                                              answers: [("Answer: ", "hello\n")])
            #expect(hello.commandOutput.contains("got=hello\n"), "\(hello.output)")
            #expect(hello.answered == 1)
            #expect(hello.exitStatus == 0)

            let two = try LoginTerminal.run(user: user, command: [
                "/bin/sh", "-c", #"printf "First: "; read a; printf "Second: "; read b; echo "$a+$b""#,
            ], answers: [("First: ", "1\n"), ("Second: ", "2\n")])
            #expect(two.commandOutput.contains("1+2\n"), "\(two.output)")
            #expect(two.answered == 2)

            let interrupted = try LoginTerminal.run(user: user, command: ["/bin/sh", "-c", prompt],
                                                    answers: [("Answer: ", "\u{3}")])
            #expect(interrupted.exitStatus == 130, "\(interrupted.output)")
            #expect(!interrupted.commandOutput.contains("got="))

            let endOfInput = try LoginTerminal.run(user: user, command: ["/bin/sh", "-c", #"printf "Answer: "; read x; echo "read=$?""#],
                                                   answers: [("Answer: ", "\u{4}")])
            #expect(endOfInput.commandOutput.contains("read=1\n"), "\(endOfInput.output)")

            // Text that never comes is never answered.
            let unanswered = try LoginTerminal.run(user: user, command: ["/bin/true"], answers: [("Password: ", "secret\n")])
            #expect(unanswered.answered == 0)
            #expect(unanswered.exitStatus == 0)
            #expect(!unanswered.output.contains("secret"))
        }

        @Test func environmentAndArgumentsArriveUnchanged() throws {
            let user = try TestUser("lgenv", shell: "/bin/sh")
            let value = #"it's "quoted" $HOME `id` \ ; | *"#
            let argument = "two words; $(id) 'x'"
            let run = try LoginTerminal.run(user: user, command: ["/bin/sh", "-c", #"printf '%s|%s\n' "$DA_VALUE" "$1""#, "sh", argument],
                                            environment: ["DA_VALUE": value])
            #expect(run.commandOutput == "\(value)|\(argument)\n", "\(run.output)")
            #expect(run.exitStatus == 0)
            #expect(throws: SetupError.self) { try LoginTerminal.run(user: user, command: ["/bin/echo", "a\nb"]) }
            #expect(throws: SetupError.self) { try LoginTerminal.run(user: user, command: ["/bin/true"], environment: ["A=B": "c"]) }
        }

        @Test func legacyTIOCSTIIsOffWhileTheSettingsLive() throws {
            let old = try #require(Self.read(TerminalSettings.legacyTIOCSTIPath))
            let user = try TestUser("lgsti", shell: "/bin/sh")
            // Injection into the session's own terminal: EIO (5) when off; a success is flushed
            // so that the injected key never reaches the shell.
            let inject = """
                import fcntl, termios
                try:
                    fcntl.ioctl(0, termios.TIOCSTI, b"x")
                except OSError as e:
                    print("sti=%d" % e.errno)
                else:
                    termios.tcflush(0, termios.TCIFLUSH)
                    print("sti=ok")
                """
            let directory = try TemporaryDirectory()
            let script = directory.path + "/inject.py"
            try Data(inject.utf8).write(to: URL(fileURLWithPath: script))
            chmod(script, 0o644)
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let run = try LoginTerminal.run(user: user, command: [
                "/bin/sh", "-c", #"cat /proc/sys/dev/tty/legacy_tiocsti; /usr/bin/python3 "$1""#, "sh", script,
            ])
            #expect(run.commandOutput == "0\nsti=5\n", "\(run.output)")
            settings.restore()
            #expect(Self.read(TerminalSettings.legacyTIOCSTIPath) == old)

            // deinit restores too.
            do {
                let scoped = try TerminalSettings(legacyTIOCSTI: 0)
                #expect(Self.read(TerminalSettings.legacyTIOCSTIPath) == "0")
                withExtendedLifetime(scoped) {}
            }
            #expect(Self.read(TerminalSettings.legacyTIOCSTIPath) == old)
        }

        @Test func aDeadlineKillsTheWholeSessionAndReportsWhatWasSeen() throws {
            let user = try TestUser("lgdead", shell: "/bin/sh")
            let started = Date()
            do {
                _ = try LoginTerminal.run(user: user, command: ["/bin/sh", "-c", "echo waiting; sleep 600"], timeout: 3)
                Issue.record("the run ended although its command sleeps")
            } catch let error as LoginTerminalError {
                #expect(error.output.contains("waiting\n"))
                #expect(error.reason.contains("no end after"))
            }
            #expect(Date().timeIntervalSince(started) < 30)
            #expect(Self.waitForNoProcesses(of: user.uid), "a process of the session outlived the deadline")
            #expect(throws: SetupError.self) { try LoginTerminal.run(user: try TestUser("lgnosh"), command: ["/bin/true"]) }
        }

        // MARK: - Helpers

        static let ownSessionID = read("/proc/self/sessionid")

        struct ProcessView {
            var uid: UInt32?
            var parent: pid_t?
            var exe: String?
            var sessionID: String?
        }

        /// As root sees a process: owner, parent, executable, audit session.
        static func processInfo(_ pid: pid_t) -> ProcessView {
            let status = read("/proc/\(pid)/status") ?? ""
            func field(_ name: String) -> String? {
                status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?
                    .dropFirst(name.count + 1).split(separator: "\t").first.map(String.init)
            }
            return ProcessView(uid: field("Uid").flatMap(UInt32.init), parent: field("PPid").flatMap(pid_t.init),
                               exe: try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"),
                               sessionID: read("/proc/\(pid)/sessionid"))
        }

        static func read(_ path: String) -> String? {
            (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        struct UTMPRecord {
            var type: String
            var pid: String
            var user: String
            var line: String
        }

        /// /run/utmp through `utmpdump`: `[type] [pid] [id] [user] [line] [host] [addr] [time]`.
        static func utmpRecords() throws -> [UTMPRecord] {
            let dump = try TestProcess.run("/usr/bin/utmpdump", [TerminalSettings.utmpPath])
            guard dump.status == 0 else { throw SetupError("utmpdump: \(dump.stderr)") }
            return dump.stdout.split(separator: "\n").compactMap { line in
                let fields = line.dropFirst().dropLast().components(separatedBy: "] [")
                    .map { $0.trimmingCharacters(in: .whitespaces) }
                guard line.hasPrefix("["), fields.count == 8 else { return nil }
                return UTMPRecord(type: fields[0], pid: fields[1], user: fields[3], line: fields[4])
            }
        }

        /// Zombies aside: a killed process may wait for a reaper.
        static func waitForNoProcesses(of uid: UInt32, timeout: Double = 5) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            repeat {
                let alive = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter { entry in
                    guard let pid = pid_t(entry), let status = read("/proc/\(pid)/status") else { return false }
                    return processInfo(pid).uid == uid && !status.contains("State:\tZ")
                }
                if alive.isEmpty { return true }
                usleep(100_000)
            } while Date() < deadline
            return false
        }

        static func waitForUserProcess(_ user: String, timeout: Double = 30) throws -> UTMPRecord? {
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                if let record = try utmpRecords().first(where: { $0.type == "7" && $0.user == user }) { return record }
                usleep(100_000)
            }
            return nil
        }
    }
}

/// What a login test may change on the machine, compared before and after.
private struct MachineState: Equatable {
    var utmp = access(TerminalSettings.utmpPath, F_OK) == 0
    var legacyTIOCSTI = LoginSessions.LoginTerminalHarnessTests.read(TerminalSettings.legacyTIOCSTIPath)
    var motd = access("/run/motd.dynamic", F_OK) == 0
    var wtmp = MachineState.size("/var/log/wtmp")
    var lastlog = MachineState.size("/var/log/lastlog")

    static func size(_ path: String) -> Int? {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : nil
    }
}

/// A body run on its own thread, for checks from outside while it runs.
private final class Background<Value: Sendable>: Sendable {
    private let result = Mutex<Result<Value, any Error>?>(nil)

    init(_ body: @escaping @Sendable () throws -> Value) {
        Thread { [self] in
            let outcome = Result { try body() }
            result.withLock { $0 = outcome }
        }.start()
    }

    func wait() throws -> Value {
        while true {
            if let outcome = result.withLock({ $0 }) { return try outcome.get() }
            usleep(50_000)
        }
    }
}
