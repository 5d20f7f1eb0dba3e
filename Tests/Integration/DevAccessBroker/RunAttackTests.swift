import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `devaccess run` as an unprivileged user attacks it: what devaccessd (root) does with the
/// program path before anything runs, and whether what runs is what was decided for.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct RunAttackTests {
    /// The fields of /proc/PID/stat after the command (field 3 on): state, ppid, pgrp, session, tty_nr.
    static func statFields(_ pid: Int32) -> [String] {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return [] }
        return text[text.index(after: close)...].split(separator: " ").map(String.init)
    }

    /// Says hello on argv[1] and prints how long the answer took and its start, or
    /// "no reply" after argv[2] seconds: is devaccessd still answering others?
    static let timedHello = """
        import socket, sys, time
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(int(sys.argv[2]))
        sock.connect(sys.argv[1])
        started = time.monotonic()
        sock.sendall(b'{"version":1,"id":1,"type":"hello"}\\n')
        try:
            reply = sock.recv(65536)
        except socket.timeout:
            reply = b"no reply"
        print("%.1f %s" % (time.monotonic() - started, reply[:60].decode(errors="replace")))
        """

    /// Python: `run(socket, program, ...)` sends a `run` as devaccess would, without the
    /// CLI's own checks (an attacker's client), and returns the replies until the final one.
    static let rawClient = """
        import array, json, os, socket
        def run(path, program, arguments=None, permissions=("camera",), streams=(0, 1, 2), directory="/",
                environment=(), before_final=None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            message = {"version": 1, "id": 1, "type": "run", "program": program,
                       "arguments": arguments or [program], "environment": list(environment),
                       "directory": directory, "umask": 18, "permissions": list(permissions)}
            line = (json.dumps(message) + "\\n").encode()
            sock.sendmsg([line[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", streams))])
            sock.sendall(line[1:])
            replies, buffer = [], b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\\n" in buffer:
                    text, buffer = buffer.split(b"\\n", 1)
                    reply = json.loads(text)
                    replies.append(reply)
                    if reply["type"] == "run-started" and before_final:
                        before_final(reply)
                    if reply["type"] not in ("run-started", "prompt"):
                        sock.close()
                        return replies
            sock.close()
            return replies

        """

    // MARK: - The program path is opened by root

    /// devaccessd opened the named path as root, O_RDONLY without O_NOCTTY, before checking
    /// that it is a regular file. A pty the user made (and nobody has opened yet) named as
    /// the program became the controlling terminal of devaccessd's session when devaccessd
    /// leads one (as under systemd); the user then types ^Z or ^C on the master and devaccessd
    /// stops. Any device the user names gets opened by root too (a watchdog starts, a tape
    /// rewinds). Now the path is opened O_PATH: nothing is opened until it is known to be a
    /// regular file.
    @Test func namingAPtyAsTheProgramDoesNotGiveDevaccessdAControllingTerminal() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", daemonLeadsSession: true)
        let user = try TestUser("runatty")
        let daemon = setup.daemon.pid
        #expect(Self.statFields(daemon)[3] == String(daemon), "devaccessd leads no session: \(Self.statFields(daemon))")
        let script = Self.rawClient + """
            import ctypes, os, subprocess, sys, time
            libc = ctypes.CDLL(None)
            libc.ptsname.restype = ctypes.c_char_p
            master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
            assert libc.grantpt(master) == 0 and libc.unlockpt(master) == 0
            slave = libc.ptsname(master).decode()
            # Not the CLI: it checks the path first (access X_OK); devaccessd must not rely on that.
            replies = run(sys.argv[2], slave)
            with open("/proc/%s/stat" % sys.argv[1]) as stat:
                tty = stat.read().rsplit(")", 1)[1].split()[4]
            print(tty, replies)
            # ^C on the terminal: SIGINT to its foreground process group.
            os.write(master, b"\\x03")
            time.sleep(1)
            """
        let attack = try user.python(script, [String(daemon), setup.daemon.socketPath])
        #expect(attack.stdout.hasPrefix("0 "), "devaccessd got the user's pty as its controlling terminal: \(attack.stdout)")
        #expect(setup.daemon.process.isRunning, "devaccessd stopped after ^C on the user's pty: \(attack.stdout)")
    }

    /// devaccessd hashed a program the user could change (to pin a program grant to it) to
    /// its end, however long, on a request handler thread: a sparse executable of some
    /// terabytes, named by a few runs at once, took every handler thread for hours, and
    /// nobody's request (status, request, revoke) was answered. Now a program that must be
    /// hashed has a size limit, and no more than the size it had when opened is read.
    @Test func runsOfAHugeSparseProgramDoNotStopDevaccessdAnsweringOthers() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("runhuge")
        let other = try TestUser("runother")
        let scratch = try TemporaryDirectory()
        let program = scratch.path + "/huge"
        #expect(chmod(scratch.path, 0o755) == 0)
        _ = try TestProcess.run("/usr/bin/truncate", ["-s", "8T", program])
        #expect(chown(program, user.uid, user.gid) == 0 && chmod(program, 0o755) == 0)
        // Sixteen runs of it at once (more than devaccessd has handler threads), left waiting.
        let flood = try user.background(Self.rawClient + """
            import json, sys, threading, time
            answered = []
            def one():
                try:
                    answered.append(repr(run(sys.argv[1], sys.argv[2])))
                except Exception as error:
                    answered.append(repr(error))
            for _ in range(16):
                threading.Thread(target=one, daemon=True).start()
            time.sleep(1)
            print(json.dumps({"answered within 1 s": answered}), flush=True)
            time.sleep(120)
            """, [setup.daemon.socketPath, program])
        defer { flood.stop() }
        // Another user says hello (answered on a handler thread): within a generous bound.
        let hello = try other.python(RunAttackTests.timedHello, [setup.daemon.socketPath, "20"])
        #expect(hello.stdout.contains("\"hello\""),
                "another user's hello was not answered while \(user.name)'s runs were hashed: \(hello.stdout)")
    }

    // MARK: - What runs is what was decided for

    /// devaccessd hashes the file it opened, then (milliseconds later, or after a prompt) execs
    /// the program by its path: a process of the user that renames another file over the path
    /// in between would run that file with a grant pinned to the hashed one. Here: such a
    /// grant (written straight into the ledger, as pinned grants once were recorded), and a
    /// swapper renaming a camera-opening script and a harmless one over the path in turn.
    /// Program grants now stand only for files only root can change, so none applies.
    @Test func aProgramSwappedBetweenItsHashAndItsExecDoesNotRunWithTheGrantOfTheHashedOne() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("runswap")
        let home = try TemporaryDirectory()
        #expect(chown(home.path, user.uid, user.gid) == 0 && chmod(home.path, 0o755) == 0)
        let marks = home.path + "/marks", program = home.path + "/x", stop = home.path + "/stop"
        let harmless = "#!/bin/sh\necho harmless >> \"$2\"\n"
        let camera = "#!/bin/sh\nif ( exec 3<>\"$1\" ) 2>/dev/null; then echo evil-opened >> \"$2\"; "
            + "else echo evil-refused >> \"$2\"; fi\n"
        for (name, text) in [("harmless", harmless), ("camera", camera)] {
            let path = home.path + "/" + name
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            #expect(chown(path, user.uid, user.gid) == 0 && chmod(path, 0o755) == 0)
        }
        #expect(link(home.path + "/harmless", program) == 0)
        let descriptor = open(home.path + "/harmless", O_RDONLY)
        let sha = try ProgramDigest.sha256(descriptor: descriptor)
        close(descriptor)
        // Written while devaccessd is stopped (it is the ledger's one writer while it runs).
        try setup.stop()
        let ledger = try Ledger(path: setup.stateDirectory + "/" + Ledger.fileName, journal: .disabled)
        _ = try ledger.recordGrant(NewGrant(
            subject: Principal(uid: user.uid, name: user.name), program: Program(path: program, sha256: sha),
            permission: .camera, decision: .allow, scope: .always,
            decidedBy: Principal(uid: user.uid, name: user.name), method: .consent))
        try setup.start()
        // The swapper: the user's own process, renaming the two over the path in turn.
        let swapper = try user.background("""
            import json, os, sys
            home = sys.argv[1]
            print(json.dumps({"swapping": True}), flush=True)
            while not os.path.exists(home + "/stop"):
                for name in ("camera", "harmless"):
                    os.link(home + "/" + name, home + "/next")
                    os.rename(home + "/next", home + "/x")
            """, [home.path])
        defer {
            _ = FileManager.default.createFile(atPath: stop, contents: nil)
            swapper.stop()
        }
        var attempts = 0
        var said = ""
        while attempts < 60 && !said.contains("evil-opened") {
            attempts += 1
            _ = try RunTests.run(user, setup, ["--camera", "--", program, setup.camera, marks])
            said = (try? String(contentsOfFile: marks, encoding: .utf8)) ?? ""
        }
        _ = FileManager.default.createFile(atPath: stop, contents: nil)
        // A program its user can change is decided for each run: no standing program grant
        // (pinned or not) applies to it, so there is nothing for a swap to borrow.
        #expect(!said.contains("evil-opened"),
                "a file renamed over the path after the hash ran with the grant pinned to the hashed one (\(attempts) runs)")
    }

    // MARK: - What root's resolution tells the user

    /// devaccessd resolves and opens the program as root, so its refusals tell the user about
    /// files they cannot reach: in a directory only root may enter, an existing file is
    /// answered differently from a missing one.
    @Test func aRunDoesNotTellTheUserWhetherAFileTheyCannotReachExists() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=deny\n")
        let user = try TestUser("runoracle")
        let secret = try TemporaryDirectory()
        #expect(chmod(secret.path, 0o700) == 0)
        try Data("x".utf8).write(to: URL(fileURLWithPath: secret.path + "/present"))
        let script = Self.rawClient + """
            import sys
            for name in ("present", "absent"):
                reply = run(sys.argv[1], sys.argv[2] + "/" + name)[-1]
                print(reply.get("reason") or reply.get("type"))
            """
        let answers = try user.python(script, [setup.daemon.socketPath, secret.path]).stdout
            .split(separator: "\n").map { $0.replacingOccurrences(of: "present", with: "NAME")
                .replacingOccurrences(of: "absent", with: "NAME") }
        #expect(answers.count == 2 && answers[0] == answers[1],
                "the answers tell an existing file from a missing one: \(answers.joined(separator: " / "))")
    }

    // MARK: - Limits

    /// The program is forked by devaccessd, so it has devaccessd's resource limits, not the
    /// caller's: a user held to 64 open files (or processes, pam_limits) runs anything without
    /// that limit through `devaccess run`.
    @Test func theProgramIsHeldToTheCallersResourceLimits() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("runlimit")
        let shown = try user.run("/bin/sh", ["-c", "ulimit -S -n 64 && ulimit -H -n 64 && exec \"$1\" run --socket "
                                             + "\"$2\" --camera -- /bin/sh -c 'ulimit -H -n'", "sh",
                                             TestProcess.devaccessBinary, setup.daemon.socketPath])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "64",
                "the caller's hard limit of 64 files became \(shown.stdout) in the run")
    }
}

// MARK: - Hostile review 3 (issue 27)

extension RunAttackTests {
    /// devaccessd resolved the program path as root and echoed the result: a user naming
    /// another user's /proc/PID/cwd or /proc/PID/fd/N learnt the path of that user's private
    /// directory ("/home/bob/merger-with-acme is not a regular file"), and /proc/self/fd/N
    /// named devaccessd's own descriptors. Now the program is opened as the caller, and a
    /// refusal names no path but the one the caller gave.
    @Test func aRefusalNamesNoPathOfAnotherUsersPrivateDirectoryNorOfDevaccessdsDescriptors() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let alice = try TestUser("runpeek")
        let bob = try TestUser("runbob")
        let home = try TemporaryDirectory()
        let secret = home.path + "/merger-with-acme"
        #expect(mkdir(secret, 0o700) == 0 && chown(secret, bob.uid, bob.gid) == 0)
        for (name, mode) in [("plan.txt", mode_t(0o644)), ("tool", mode_t(0o755))] {
            try Data("#!/bin/sh\necho secret\n".utf8).write(to: URL(fileURLWithPath: secret + "/" + name))
            #expect(chown(secret + "/" + name, bob.uid, bob.gid) == 0 && chmod(secret + "/" + name, mode) == 0)
        }
        let holder = try bob.background("""
            import json, os, sys, time
            os.chdir(sys.argv[1])
            plan = open("plan.txt")
            tool = os.open("tool", os.O_PATH)
            print(json.dumps({"pid": os.getpid(), "plan": plan.fileno(), "tool": tool}), flush=True)
            time.sleep(120)
            """, [secret])
        defer { holder.stop() }
        let pid = holder.report["pid"] as? Int ?? 0, plan = holder.report["plan"] as? Int ?? 0
        let tool = holder.report["tool"] as? Int ?? 0
        let daemon = setup.daemon.pid
        var programs = ["/proc/\(pid)/cwd", "/proc/\(pid)/fd/\(plan)", "/proc/\(pid)/fd/\(tool)",
                        "/proc/\(pid)/cwd/plan.txt", "/proc/\(pid)/cwd/tool", "/proc/\(pid)/root\(secret)/plan.txt"]
        programs += (0..<24).flatMap { ["/proc/self/fd/\($0)", "/proc/\(daemon)/fd/\($0)"] }
        programs += ["/proc/self/cwd", "/proc/\(daemon)/cwd", "/proc/\(daemon)/exe"]
        // What devaccessd holds, as root sees it: none of it may show in an answer to alice.
        var forbidden: Set<String> = [secret, "merger-with-acme", setup.stateDirectory]
        for fd in 0..<64 {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink("/proc/\(daemon)/fd/\(fd)", &buffer, buffer.count - 1)
            if count > 1 { forbidden.insert(String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)) }
        }
        let script = Self.rawClient + """
            import json, sys
            for program in sys.argv[2:]:
                reply = run(sys.argv[1], program)[-1]
                print(json.dumps([program, reply.get("reason") or reply.get("type")]))
            """
        let answers = try alice.python(script, [setup.daemon.socketPath] + programs).stdout.split(separator: "\n")
        #expect(answers.count == programs.count, "\(answers)")
        for answer in answers {
            guard let pair = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String],
                  pair.count == 2 else { continue }
            let said = pair[1].replacingOccurrences(of: pair[0], with: "<asked>")
            for path in forbidden where said.contains(path) {
                Issue.record("asking for \(pair[0]) got an answer naming \(path): \(pair[1])")
            }
        }
        // Nothing of bob's ran.
        let runs = try setup.ledger().runs(uid: alice.uid, includeEnded: true)
        #expect(!runs.contains { $0.program.path.contains("merger-with-acme") }, "\(runs)")
    }

    /// devaccessd hashed and recorded the file it opened, then executed the program by its
    /// path: a file renamed over the path in between ran, recorded as the other one. Now the
    /// child executes the descriptor devaccessd decided on (execveat, AT_EMPTY_PATH), so
    /// what ran is what the run's record names (a #! script included).
    @Test func theProgramARunRecordsIsTheOneThatRuns() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("runsame")
        let home = try TemporaryDirectory()
        #expect(chown(home.path, user.uid, user.gid) == 0 && chmod(home.path, 0o755) == 0)
        let marks = home.path + "/marks", program = home.path + "/x", stop = home.path + "/stop"
        var names: [String: String] = [:]
        for name in ["one", "two"] {
            let path = home.path + "/" + name
            try Data("#!/bin/sh\necho \(name) >> \"$1\"\n".utf8).write(to: URL(fileURLWithPath: path))
            #expect(chown(path, user.uid, user.gid) == 0 && chmod(path, 0o755) == 0)
            let descriptor = open(path, O_RDONLY)
            names[try ProgramDigest.sha256(descriptor: descriptor)] = name
            close(descriptor)
        }
        #expect(link(home.path + "/one", program) == 0)
        let swapper = try user.background("""
            import json, os, sys
            home = sys.argv[1]
            print(json.dumps({"swapping": True}), flush=True)
            while not os.path.exists(home + "/stop"):
                for name in ("two", "one"):
                    os.link(home + "/" + name, home + "/next")
                    os.rename(home + "/next", home + "/x")
            """, [home.path])
        defer {
            _ = FileManager.default.createFile(atPath: stop, contents: nil)
            swapper.stop()
        }
        var mismatches: [String] = []
        for attempt in 1...24 {
            let result = try RunTests.run(user, setup, ["--camera", "--", program, marks])
            #expect(result.status == 0, "run \(attempt): \(result.stderr)")
            let ran = ((try? String(contentsOfFile: marks, encoding: .utf8)) ?? "").split(separator: "\n").last
            let recorded = try setup.ledger().runs(uid: user.uid, includeEnded: true).max { $0.id < $1.id }
            let named = recorded?.program.sha256.flatMap { names[$0] }
            if ran.map(String.init) != named { mismatches.append("run \(attempt): ran \(ran ?? "nothing"), recorded \(named ?? "?")") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "; "))")
    }

    /// The run's limits were read from /proc/<peer pid>/limits when the run was launched: a
    /// peer that exited (its connection handed to a child) left its pid to be reused, and the
    /// program got the limits of whatever process had it then. Here the pid is reused on
    /// purpose (ns_last_pid) by a process with other limits.
    @Test func aPeerThatExitedBeforeItsRunDoesNotLendItsPidsLimitsToTheProgram() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("runreuse")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let go = marks.path + "/go", result = marks.path + "/result"
        let client = try user.background("""
            import array, json, os, resource, socket, sys, time
            path, go, result = sys.argv[1], sys.argv[2], sys.argv[3]
            peer = os.fork()
            if peer == 0:
                resource.setrlimit(resource.RLIMIT_NPROC, (500, 500))
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                if os.fork() == 0:
                    while not os.path.exists(go):
                        time.sleep(0.02)
                    r, w = os.pipe()
                    program = "/usr/bin/python3"
                    code = "import resource; print(*resource.getrlimit(resource.RLIMIT_NPROC))"
                    message = {"version": 1, "id": 1, "type": "run", "program": program,
                               "arguments": [program, "-c", code], "environment": [], "directory": "/",
                               "umask": 18, "permissions": ["camera"]}
                    line = (json.dumps(message) + "\\n").encode()
                    sock.sendmsg([line[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", (0, w, 2)))])
                    sock.sendall(line[1:])
                    os.close(w)
                    replies, buffer = [], b""
                    while True:
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        buffer += chunk
                        if buffer.endswith(b"\\n") and b'"run-started"' not in buffer.split(b"\\n")[-2]:
                            break
                    output = os.read(r, 1000).decode()
                    with open(result + ".tmp", "w") as out:
                        json.dump({"replies": buffer.decode(), "output": output}, out)
                    os.rename(result + ".tmp", result)
                os._exit(0)
            os.waitpid(peer, 0)
            print(json.dumps({"peer": peer}), flush=True)
            time.sleep(120)
            """, [setup.daemon.socketPath, go, result])
        defer { client.stop() }
        let peer = Int32(client.report["peer"] as? Int ?? 0)
        // Another process takes the peer's pid: the next pid is set to it, then forked (others
        // on the machine may fork in between: tried again then).
        var impostor: Process?
        for _ in 0..<200 where impostor == nil {
            let next = open("/proc/sys/kernel/ns_last_pid", O_WRONLY)
            _ = Array(String(peer - 1).utf8).withUnsafeBytes { write(next, $0.baseAddress, $0.count) }
            close(next)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = ["--nproc=777:777", "/bin/sleep", "60"]
            try process.run()
            if process.processIdentifier == peer {
                impostor = process
            } else {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        // SIGKILL: the test process may have SIGTERM ignored, and its children inherit that.
        defer { if let impostor { kill(impostor.processIdentifier, SIGKILL); impostor.waitUntilExit() } }
        try #require(impostor != nil, "pid \(peer) could not be reused")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let done = LiveEnforcementTests.waitFor(30) { FileManager.default.fileExists(atPath: result) }
        try #require(done != nil, "the run never answered: \(setup.daemon.log)")
        let answer = try json(String(contentsOfFile: result, encoding: .utf8))
        let output = (answer["output"] as? String ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        // The run was judged (not turned away for its protocol version, which would prove nothing).
        #expect(!(answer["replies"] as? String ?? "").contains("unsupported-version"), "\(answer)")
        #expect(!output.contains("777"), "the program got the limits of the process that reused the peer's pid: \(answer)")
        #expect(output.isEmpty || output == "500 500", "the program got limits that are not its caller's: \(answer)")
    }
}
