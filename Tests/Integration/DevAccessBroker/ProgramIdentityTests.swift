import Foundation
import Glibc
import Testing
@testable import DevAccessBroker
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `Program=` rules match only a program devaccessd can name: its executable and every
/// file mapped executable are root's alone. `LD_PRELOAD=evil.so /usr/bin/sleep` is not
/// /usr/bin/sleep. And a request the devaccess CLI carries is the request of the program
/// that ran the CLI.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and libraries"))
struct ProgramIdentityTests {
    static let sleep = DaemonTests.realPath("/usr/bin/sleep")
    static let sleepRule = "[camera]\nDefault=deny\n[Rule]\nPermission=camera\nProgram=\(sleep)\nAction=allow\n"
    /// The rule where it can grant: the user's default is to ask, and with no terminal
    /// nobody can answer (the password prompt ends undecided).
    static let sleepRuleAsk = "[camera]\nDefault=ask\n[Rule]\nPermission=camera\nProgram=\(sleep)\nAction=allow\n"

    /// A directory the user owns, as their home or /tmp would be: what they put there is theirs.
    static func userDirectory(_ user: TestUser) throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory()
        try TestProcess.setup("chown", ["\(user.uid):\(user.gid)", directory.path])
        return directory
    }

    static var compiler: String? {
        ["/usr/bin/cc", "/usr/bin/gcc"].first { access($0, X_OK) == 0 }
    }

    /// A shared library the user made: compiled as the user with `cc -shared` (a constructor
    /// that runs `source`), or where there is no compiler, a copy of the system's libm
    /// placed by the user (mapped executable and theirs: enough to be untrusted).
    static func userLibrary(_ user: TestUser, in directory: TemporaryDirectory, source: String = "") throws -> String {
        let library = directory.path + "/evil.so"
        if let compiler {
            let file = directory.path + "/evil.c"
            try Data((source.isEmpty ? "__attribute__((constructor)) static void evil(void) {}\n" : source).utf8)
                .write(to: URL(fileURLWithPath: file))
            try TestProcess.setup("chown", ["\(user.uid):\(user.gid)", file])
            let built = try user.run(compiler, ["-shared", "-fPIC", "-o", library, file])
            guard built.status == 0 else { throw SetupError("cc failed: \(built.stderr)") }
        } else {
            let maps = try String(contentsOfFile: "/proc/self/maps", encoding: .utf8)
            guard let libm = maps.split(separator: "\n").compactMap({ $0.split(separator: " ").last })
                .first(where: { $0.hasSuffix("/libm.so.6") }) else { throw SetupError("no libm.so.6 to copy") }
            let copied = try user.run("/usr/bin/cp", [String(libm), library])
            guard copied.status == 0 else { throw SetupError("cp failed: \(copied.stderr)") }
        }
        return library
    }

    /// Runs, as the user, a process that execs `program` (optionally with LD_PRELOAD) and
    /// whose child, once the parent runs `program`, execs `command`: `command`'s parent is
    /// that program. Returns what `command` printed; the program is killed afterwards.
    static let underProgram = """
        import os, sys, time, json
        program, preload, out = sys.argv[1:4]; command = sys.argv[4:]
        p = os.fork()
        if p == 0:
            c = os.fork()
            if c == 0:
                parent = os.getppid(); deadline = time.time() + 30
                while time.time() < deadline and os.readlink("/proc/%d/exe" % parent) != program:
                    time.sleep(0.01)
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 1); os.dup2(fd, 2)
                os.execv(command[0], command)
            with open(out + ".tmp", "w") as f: f.write(str(c))
            os.rename(out + ".tmp", out + ".pid")
            env = {"PATH": "/usr/bin:/bin"}
            if preload: env["LD_PRELOAD"] = preload
            os.execve(program, [program, "120"], env)
        deadline = time.time() + 90
        while not os.path.exists(out + ".pid"): time.sleep(0.01)
        c = int(open(out + ".pid").read())
        def state(pid):
            try: return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
            except OSError: return None
        # The command ends as a zombie: its parent (the program) never reaps it.
        while time.time() < deadline and state(c) not in (None, "Z"): time.sleep(0.02)
        maps = open("/proc/%d/maps" % p).read()
        exe = os.readlink("/proc/%d/exe" % p)
        os.kill(p, 9); os.waitpid(p, 0)
        print(json.dumps({"output": open(out).read(), "program": exe, "parent_pid": p,
                          "preloaded": bool(preload) and preload in maps}))
        """

    static func runUnder(_ program: String, preload: String?, as user: TestUser, in directory: TemporaryDirectory,
                         _ command: [String]) throws -> [String: Any] {
        let run = try user.python(Self.underProgram, [program, preload ?? "", directory.path + "/out"] + command)
        guard run.status == 0 else { throw SetupError("runner failed (\(run.status)): \(run.stderr)") }
        return try json(run.stdout)
    }

    // MARK: The attack: LD_PRELOAD

    /// The LD_PRELOADed library's constructor connects and asks, inside /proc/PID/exe =
    /// /usr/bin/sleep: exactly the attack. No grant; the reason names the library.
    @Test func aPreloadedLibraryAskingAsSleepGetsNoGrant() throws {
        guard Self.compiler != nil else {
            Issue.record("no C compiler (cc): the preloaded library cannot speak the protocol; install gcc")
            return
        }
        let setup = try RequestSetup(policy: Self.sleepRule)
        let mallory = try TestUser("preload")
        let scratch = try Self.userDirectory(mallory)
        let library = try Self.userLibrary(mallory, in: scratch, source: Self.askingConstructor)
        let out = scratch.path + "/reply"
        let run = try mallory.run("/usr/bin/env", ["LD_PRELOAD=\(library)", "EVIL_SOCKET=\(setup.daemon.socketPath)",
                                                   "EVIL_OUT=\(out)", Self.sleep, "0"])
        #expect(run.status == 0, "\(run.stderr)")
        let reply = try json(String(contentsOfFile: out, encoding: .utf8))
        let result = try #require((reply["results"] as? [[String: Any]])?.first, "\(reply)")
        #expect(result["outcome"] as? String == "restricted", "\(reply)")
        let message = result["message"] as? String ?? ""
        #expect(message.contains("program identity not trusted: \(library) is mapped executable and owned by uid \(mallory.uid)"),
                "\(message)")
        #expect(message.contains("the rule for \(Self.sleep)"), "\(message)")
        #expect(try setup.grants(mallory).isEmpty, "the Program= rule did not grant")
        #expect(try !mallory.canOpen(setup.camera, .read))
        let received = try #require(try setup.requestEvents(mallory).first { $0.details["stage"] == "received" })
        #expect(received.program == Self.sleep, "the audit names what the kernel ran")
        #expect(received.details["program_trust"]?.contains("\(library) is mapped executable") == true,
                "\(received.details)")
    }

    /// The same program with a library from the user's directory in LD_PRELOAD runs the
    /// CLI: no grant; without it, the rule grants.
    @Test func theProgramRuleMatchesTheCleanProgramOnly() throws {
        let setup = try RequestSetup(policy: Self.sleepRuleAsk)
        let users = try ["pre", "cln"].map { try TestUser("prule\($0)") }
        // For an hour: the default term, once, would end with the program that ran the CLI,
        // which exits before the open below.
        let command = [TestProcess.devaccessBinary, "request", "camera", "--for", "1h", "--reason", "rule"] + setup.socket

        let mallory = users[0]
        let scratch = try Self.userDirectory(mallory)
        let library = try Self.userLibrary(mallory, in: scratch)
        let preloaded = try Self.runUnder(Self.sleep, preload: library, as: mallory, in: scratch, command)
        #expect(preloaded["preloaded"] as? Bool == true, "the library really was mapped: \(preloaded)")
        let refused = preloaded["output"] as? String ?? ""
        #expect(try setup.grants(mallory).isEmpty, "\(refused)")
        let asked = try #require(try setup.requestEvents(mallory).first { $0.details["stage"] == "received" })
        #expect(asked.details["policy"] == "ask", "the default decides: \(asked.details)")
        #expect(asked.details["program_rule_not_applied"]?.contains(
            "program identity not trusted: \(library) is mapped executable and owned by uid \(mallory.uid)") == true,
            "\(asked.details)")
        #expect(try !mallory.canOpen(setup.camera, .read))

        let alice = users[1]
        let clean = try Self.runUnder(Self.sleep, preload: nil, as: alice, in: try Self.userDirectory(alice), command)
        #expect(clean["preloaded"] as? Bool == false)
        let grants = try setup.grants(alice)
        #expect(grants.count == 1 && grants.first?.decision == .allow && grants.first?.method == .policy,
                "\(clean["output"] ?? "")")
        #expect(try alice.canOpen(setup.camera, .readWrite), "the rule for \(Self.sleep) granted: \(grants) \(clean)")
        // What asked is the program that ran the CLI; the CLI is named in the details.
        let received = try #require(try setup.requestEvents(alice).first { $0.details["stage"] == "received" })
        #expect(received.program == Self.sleep, "\(String(describing: received.program))")
        #expect(received.details["cli"] == DaemonTests.realPath(TestProcess.devaccessBinary), "\(received.details)")
        #expect(received.details["requester_pid"] == String(clean["parent_pid"] as? Int ?? -1), "\(received.details)")
        #expect(received.details["program_trust"] == nil, "\(received.details)")
    }

    /// Under a `deny` for the user, a `Program=` allow cannot grant: the access list would
    /// let every program of the user in. Restricted at once, saying so; nothing recorded.
    @Test func aProgramRuleDoesNotOutweighTheUsersDenial() throws {
        let setup = try RequestSetup(policy: Self.sleepRule)
        let alice = try TestUser("pdeny")
        let command = [TestProcess.devaccessBinary, "request", "camera"] + setup.socket
        let run = try Self.runUnder(Self.sleep, preload: nil, as: alice, in: try Self.userDirectory(alice), command)
        let output = run["output"] as? String ?? ""
        #expect(output.contains("the rule for \(Self.sleep)"), "\(output)")
        #expect(output.contains("device access lists name users, not programs"), "\(output)")
        #expect(try setup.grants(alice).isEmpty, "no grant recorded and ended at once: \(output)")
        #expect(try !alice.canOpen(setup.camera, .read))
    }

    // MARK: Name what asked

    /// `devaccess pending` and the audit name the program that ran the CLI, and say when
    /// it was a shell.
    @Test func theCLIsParentIsWhatAsks() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n")
        let erin = try TestUser("parent")
        let python = DaemonTests.realPath("/usr/bin/python3")
        let fromPython = try erin.python("""
            import subprocess, sys
            r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
            print(r.stdout + r.stderr)
            """, [TestProcess.devaccessBinary, "request", "camera", "--reason", "from python"] + setup.socket)
        #expect(fromPython.stdout.contains("queued"), "\(fromPython.stdout)")
        let pending = try erin.devaccess(["pending", "--json"] + setup.socket)
        let requests = try #require(try json(pending.stdout)["requests"] as? [[String: Any]], "\(pending.stdout)")
        #expect(requests.count == 1)
        #expect(requests.first?["program"] as? String == python, "\(requests)")
        let table = try erin.devaccess(["pending"] + setup.socket)
        #expect(table.stdout.contains(python), "\(table.stdout)")
        let queued = try setup.ledger().events().map(\.event).filter { $0.type == .approvalQueued }
        #expect(queued.map(\.program) == [python])
        let received = try #require(try setup.requestEvents(erin).first { $0.details["stage"] == "received" })
        #expect(received.program == python)
        #expect(received.details["cli"] == DaemonTests.realPath(TestProcess.devaccessBinary))
        #expect(received.details["requester_is_shell"] == nil)

        // Typed at a shell (`; true`: so the shell does not exec devaccess in its place).
        let shell = DaemonTests.realPath("/bin/sh")
        let typed = try erin.run("/bin/sh", ["-c", #""$1" request microphone --socket "$2"; true"#,
                                             "sh", TestProcess.devaccessBinary, setup.daemon.socketPath])
        #expect(typed.stderr.contains("queued"), "\(typed.stdout) \(typed.stderr)")
        let events = try setup.requestEvents(erin).filter { $0.details["stage"] == "received" && $0.permission == .microphone }
        #expect(events.first?.program == shell, "\(events.map(\.program))")
        #expect(events.first?.details["requester_is_shell"] == "true", "\(events.map(\.details))")
    }

    // MARK: The identity reader

    /// Reading a process's identity directly: a clean program is trusted, a preloaded one is
    /// not and says why, an exited one is unreadable. Prints the cost of one reading.
    @Test func identityOfARunningProcess() throws {
        let mallory = try TestUser("idread")
        let scratch = try Self.userDirectory(mallory)
        let library = try Self.userLibrary(mallory, in: scratch)
        let clean = try Self.spawn(mallory, [Self.sleep, "60"])
        let preloaded = try Self.spawn(mallory, ["/usr/bin/env", "LD_PRELOAD=\(library)", Self.sleep, "60"])
        let python = try Self.spawn(mallory, ["/usr/bin/python3", "-c", "import ssl, sqlite3, time; time.sleep(60)"])
        defer { for process in [clean, preloaded, python] { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        for process in [clean, preloaded, python] { try Self.waitUntilExec(process, notOf: "/usr/bin/setpriv") }
        try Self.waitUntilExec(preloaded, notOf: "/usr/bin/env")
        try Self.waitUntilExec(python, notOf: "/usr/bin/env")
        try Self.waitUntil { (try? String(contentsOfFile: "/proc/\(python.processIdentifier)/maps", encoding: .utf8))?
            .contains("_ssl") == true }

        let trusted = try ProgramIdentity.read(pid: clean.processIdentifier, startedAt: nil).get()
        #expect(trusted.path == Self.sleep && trusted.isTrusted, "\(trusted)")
        #expect(trusted.uid == mallory.uid)
        let again = try ProgramIdentity.read(pid: clean.processIdentifier, startedAt: trusted.startTime).get()
        #expect(again == trusted)
        #expect(throws: ProgramIdentity.Unreadable.self, "another start time: not the same process") {
            try ProgramIdentity.read(pid: clean.processIdentifier, startedAt: trusted.startTime + 1).get()
        }
        let untrusted = try ProgramIdentity.read(pid: preloaded.processIdentifier, startedAt: nil).get()
        #expect(untrusted.path == Self.sleep)
        #expect(untrusted.untrusted == "\(library) is mapped executable and owned by uid \(mallory.uid)", "\(untrusted)")
        let interpreter = try ProgramIdentity.read(pid: python.processIdentifier, startedAt: nil).get()
        #expect(interpreter.isTrusted, "python and its root-installed modules: \(interpreter)")

        // The cost of one reading (the broker makes one at accept and one or two per request).
        for (name, pid) in [("sleep", clean.processIdentifier), ("python3 with ssl", python.processIdentifier)] {
            let runs = 300
            let clock = ContinuousClock()
            let elapsed = clock.measure {
                for _ in 0..<runs { _ = ProgramIdentity.read(pid: pid, startedAt: nil) }
            }
            let maps = (try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8))?
                .split(separator: "\n").filter { $0.split(separator: " ").dropFirst().first?.contains("x") == true }.count ?? 0
            let micros = (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12)
                / Double(runs)
            print("FIGURE identity read (\(name), \(maps) executable mappings): \(Int(micros.rounded())) µs")
        }
    }

    /// What a CLI request costs at request time: the CLI read again and its parent read
    /// (`Requester.identify`), measured on a waiting `devaccess request` run by python.
    @Test func theRequesterOfAWaitingCLIRequest() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n")
        let erin = try TestUser("idcli")
        let parent = try Self.spawn(erin, ["/usr/bin/python3", "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                                           TestProcess.devaccessBinary, "request", "camera", "--wait"] + setup.socket)
        defer { kill(parent.processIdentifier, SIGKILL); parent.waitUntilExit() }
        let cli = DaemonTests.realPath(TestProcess.devaccessBinary)
        var child: Int32 = 0
        try Self.waitUntil {
            guard let children = try? String(contentsOfFile: "/proc/\(parent.processIdentifier)/task/\(parent.processIdentifier)/children",
                                             encoding: .utf8),
                  let pid = children.split(separator: " ").first.flatMap({ Int32($0) }) else { return false }
            child = pid
            return (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == cli
        }
        defer { kill(child, SIGKILL) }
        let identity = try ProgramIdentity.read(pid: child, startedAt: nil).get()
        #expect(identity.isTrusted, "the CLI built by root in a root-only tree: \(identity)")
        var peer = Peer(pid: child, uid: erin.uid, gid: erin.gid, groups: [], program: identity.path)
        peer.identity = identity
        let requester = Requester.identify(peer, cliPaths: [cli])
        #expect(requester.program == DaemonTests.realPath("/usr/bin/python3"), "\(requester)")
        #expect(requester.pid == parent.processIdentifier)
        #expect(requester.uid == erin.uid)
        #expect(requester.cli?.pid == child && requester.untrusted == nil, "\(requester)")
        #expect(Requester.identify(peer, cliPaths: []).program == cli, "not the CLI: the peer is what asks")

        let runs = 300
        let elapsed = ContinuousClock().measure {
            for _ in 0..<runs { _ = Requester.identify(peer, cliPaths: [cli]) }
        }
        let micros = (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(runs)
        print("FIGURE requester of a CLI request (CLI read again + its parent): \(Int(micros.rounded())) µs")
    }

    static func spawn(_ user: TestUser, _ command: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--"] + command
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    static func waitUntilExec(_ process: Process, notOf program: String) throws {
        try waitUntil {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/exe"))
                .map { $0 != DaemonTests.realPath(program) } ?? false
        }
    }

    static func waitUntil(_ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(20)
        while !condition() {
            guard Date() < deadline else { throw SetupError("condition not met in 20 s") }
            usleep(10_000)
        }
    }

    /// The attack's library: its constructor asks for the camera from inside the program
    /// it was preloaded into, and keeps the reply line.
    static let askingConstructor = """
        #include <fcntl.h>
        #include <stdlib.h>
        #include <string.h>
        #include <sys/socket.h>
        #include <sys/time.h>
        #include <sys/un.h>
        #include <unistd.h>
        __attribute__((constructor)) static void ask(void) {
            const char *path = getenv("EVIL_SOCKET"), *out = getenv("EVIL_OUT");
            if (!path || !out) return;
            int s = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un address = {0};
            address.sun_family = AF_UNIX;
            strncpy(address.sun_path, path, sizeof address.sun_path - 1);
            if (connect(s, (struct sockaddr *)&address, sizeof address) != 0) return;
            const char *m = "{\\"version\\":1,\\"id\\":1,\\"type\\":\\"request\\",\\"permissions\\":[\\"camera\\"],"
                            "\\"reason\\":\\"preloaded\\"}\\n";
            if (write(s, m, strlen(m)) < 0) return;
            struct timeval timeout = {20, 0};
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
            int f = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            char buffer[65536];
            ssize_t n;
            while ((n = read(s, buffer, sizeof buffer)) > 0) {
                if (write(f, buffer, n) < 0) break;
                if (memchr(buffer, '\\n', n)) break;
            }
            close(f);
            close(s);
        }
        """
}
