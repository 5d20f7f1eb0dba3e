import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// `devaccess run`: the real daemon starts the program as a real user with one group id of
/// the run's own; the node (mknod 1:3, root 0600) opens for that program tree and for nothing
/// else of the user's, and stops opening when the run ends, whatever the user's processes do.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct RunTests {
    /// The policy allows the camera for everyone: no person is needed, so each test is about
    /// the run's boundary, not the prompt.
    static func setup(_ policy: String = "[camera]\nDefault=allow\n[microphone]\nDefault=allow\n") throws
        -> RequestSetup
    {
        try RequestSetup(policy: policy)
    }

    /// `devaccess run` as `user` (no terminal, a session of its own), with `input` on stdin.
    static func run(_ user: TestUser, _ setup: RequestSetup, _ arguments: [String], input: Data = Data(),
                    environment: [String: String] = [:]) throws -> (status: Int32, stdout: Data, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
        process.arguments = ["-w", "/usr/bin/setpriv", "--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups",
                             "--", TestProcess.devaccessBinary, "run", "--socket", setup.daemon.socketPath] + arguments
        process.environment = ["PATH": "/usr/bin:/bin", "DEVACCESS_TEST_DEVICES": setup.devices, "LANG": "C.UTF-8"]
            .merging(environment) { _, new in new }
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        // Written from a thread of its own: the program may fill its output pipes before it
        // has read all of its input.
        let writer = Thread {
            stdin.fileHandleForWriting.write(input)
            try? stdin.fileHandleForWriting.close()
        }
        writer.start()
        let errorBox = ErrorBox()
        let reader = Thread { errorBox.set(stderr.fileHandleForReading.readDataToEndOfFile()) }
        reader.start()
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, out, errorBox.wait())
    }

    final class ErrorBox: @unchecked Sendable {
        private let lock = NSCondition()
        private var data: Data?

        func set(_ value: Data) {
            lock.lock()
            data = value
            lock.signal()
            lock.unlock()
        }

        func wait() -> String {
            lock.lock()
            while data == nil { lock.wait() }
            let value = data ?? Data()
            lock.unlock()
            return String(decoding: value, as: UTF8.self)
        }
    }

    /// The node's ACL entries for run group ids (RunGroups), as getfacl prints them numerically.
    static func runEntries(_ node: String) throws -> [String] {
        let acl = try TestProcess.run("/usr/bin/getfacl", ["-n", "-p", "-c", node]).stdout
        return acl.split(separator: "\n").map(String.init).filter { line in
            guard line.hasPrefix("group:"), let gid = UInt32(line.split(separator: ":")[1]) else { return false }
            return RunGroups.contains(gid)
        }
    }

    // MARK: - The boundary

    @Test func theRunOpensTheCameraWhileTheSameUsersOtherProcessCannotAndTheAccessEndsWithTheRun() throws {
        let setup = try Self.setup()
        let user = try TestUser("runbound")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let opened = marks.path + "/opened", done = marks.path + "/done"
        // The program opens the camera, says so, and holds it until the test says it is done.
        let script = "exec 3<>\"$1\" || exit 9; : > \"$2\"; while [ ! -e \"$3\" ]; do sleep 0.05; done; exit 0"
        let result = Result { try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c", script, "sh",
                                                                     setup.camera, opened, done]) }
        let background = try result.get()
        let started = LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: opened) }
        #expect(started != nil, "the run's program never opened the camera: \(setup.daemon.log)")
        // The same user, at the same moment, in another process: refused.
        #expect(try !user.canOpen(setup.camera, .read))
        #expect(try Self.runEntries(setup.camera).count == 1)
        _ = FileManager.default.createFile(atPath: done, contents: nil)
        let (status, _, stderr) = background.finish()
        #expect(status == 0, "\(stderr)")
        // The run ended: its entry is gone, its once grant ended, its row says how it ended.
        #expect(try Self.runEntries(setup.camera).isEmpty)
        let grants = try setup.grants(user)
        #expect(grants.count == 1 && grants.allSatisfy { $0.revoked != nil && $0.program != nil }, "\(grants)")
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.count == 1 && runs.first?.endStatus == "exited 0", "\(runs)")
        let events = try setup.ledger().events().map(\.event)
        #expect(events.contains { $0.type == .runStart && $0.subject?.uid == user.uid })
        #expect(events.contains { $0.type == .runEnd && $0.details["end_status"] == "exited 0" })
    }

    @Test func aSetsidDescendantLeftByAFinishedRunCannotOpenTheCameraWhileAnotherRunHoldsIt() throws {
        let setup = try Self.setup()
        let user = try TestUser("runleft")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let verdict = marks.path + "/verdict", go = marks.path + "/go", holding = marks.path + "/holding"
        // Run 1 leaves a setsid'd, double-forked child behind and exits at once. The child
        // waits for the word, then tries the camera (in a subshell: a failed `exec` redirection
        // ends a shell).
        let leftover = "while [ ! -e \"$2\" ]; do sleep 0.05; done; if ( exec 3<>\"$1\" ); then echo opened > \"$3\"; "
            + "else echo refused > \"$3\"; fi"
        let first = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c",
                                               "setsid /bin/sh -c '\(leftover)' sh \"$1\" \"$2\" \"$3\" "
                                                   + "</dev/null >/dev/null 2>\"$3.err\" & exit 0",
                                               "sh", setup.camera, go, verdict])
        #expect(first.status == 0, "\(first.stderr)")
        // Run 2 of the same user holds the camera now.
        let second = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
            "exec 3<>\"$1\" || exit 9; : > \"$2\"; sleep 3", "sh", setup.camera, holding])
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: holding) } != nil)
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let answered = LiveEnforcementTests.waitFor(10) { FileManager.default.fileExists(atPath: verdict) }
        let leftoverErrors = (try? String(contentsOfFile: verdict + ".err", encoding: .utf8)) ?? "no stderr"
        #expect(answered != nil, "the leftover process never tried: \(leftoverErrors)")
        let said = (try? String(contentsOfFile: verdict, encoding: .utf8)) ?? ""
        #expect(said.hasPrefix("refused"), "the leftover of run 1 opened the camera during run 2: \(said)")
        #expect(second.finish().status == 0)
        #expect(try Self.runEntries(setup.camera).isEmpty)
    }

    /// The attack: the run's program (a member of the run's group) makes a file of the user's
    /// setgid to that group; another process of the user executes it during the run and so
    /// carries the group, and the camera with it. The program may not give anything that group.
    @Test func theRunsProgramCannotHandItsGroupToAnotherProcessThroughASetgidFile() throws {
        let setup = try Self.setup()
        let user = try TestUser("runsgid")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let copy = marks.path + "/opener", verdict = marks.path + "/verdict", done = marks.path + "/done"
        // Inside the run: copy a shell, give it the run's group (the one supplementary group in
        // RunGroups) and the setgid bit, and hold the run open until the outside has tried.
        let inside = """
            gid=$(id -G | tr ' ' '\\n' | awk '$1 >= 2046820352 && $1 <= 2063597567'); cp /bin/sh "$1"; \
            chgrp "$gid" "$1" 2>"$2.chgrp"; chmod 2755 "$1"; : > "$2.ready"; \
            while [ ! -e "$3" ]; do sleep 0.05; done
            """
        let background = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c", inside, "sh", copy,
                                                                verdict, done])
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: verdict + ".ready") } != nil)
        // Outside the run, the same user: try the camera through the copy (-p: dash keeps the egid).
        let outside = try TestProcess.run("/usr/bin/setpriv", [
            "--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--", copy, "-p", "-c",
            "( exec 3<>\"$1\" ) 2>/dev/null && echo opened || echo refused", "sh", setup.camera,
        ])
        _ = FileManager.default.createFile(atPath: done, contents: nil)
        _ = background.finish()
        let chgrp = (try? String(contentsOfFile: verdict + ".chgrp", encoding: .utf8)) ?? ""
        #expect(outside.stdout == "refused\n",
                "another process got the camera through a setgid file: \(outside.stdout) \(outside.stderr); chgrp: \(chgrp)")
        #expect(chgrp.contains("Operation not permitted"), "chgrp to the run's group was not refused: \(chgrp)")
    }

    @Test func killingTheCLIWithSIGKILLEndsTheRunAndItsAccess() throws {
        let setup = try Self.setup()
        let user = try TestUser("runkill")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let opened = marks.path + "/opened"
        let background = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
            "exec 3<>\"$1\" || exit 9; : > \"$2\"; exec sleep 60", "sh", setup.camera, opened])
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: opened) } != nil)
        #expect(try Self.runEntries(setup.camera).count == 1)
        // The CLI (setsid -> setpriv -> devaccess, each exec'd in turn) dies without a word.
        #expect(kill(background.process.processIdentifier, SIGKILL) == 0)
        _ = background.finish()
        // devaccessd hangs the program up; the run ends and takes its entry and its grant.
        let gone = LiveEnforcementTests.waitFor(15) { (try? Self.runEntries(setup.camera).isEmpty) ?? false }
        #expect(gone != nil, "the run's entry stayed after its client was killed: \(setup.daemon.log)")
        #expect(try setup.grants(user).allSatisfy { $0.revoked != nil })
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.first?.endStatus == "signal 1", "\(runs)")
    }

    // MARK: - As if run directly

    @Test func argumentsStdinStdoutAndStderrPassThroughByteExact() throws {
        let setup = try Self.setup()
        let user = try TestUser("runbytes")
        let arguments = ["a b", "", "line\nbreak", "tab\there", "ünïcödé", "--camera"]
        let printed = try Self.run(user, setup, ["--camera", "--", "/usr/bin/printf", "%s\\0"] + arguments)
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(printed.stdout == Data(arguments.map { $0 + "\0" }.joined().utf8))
        var input = Data((0..<256).map { UInt8($0) })
        input.append(Data(repeating: 0x41, count: 200_000))
        // Standard input copied to standard output and error. (Not `tee /dev/stderr`: reopening
        // the test's pipe through /proc is refused to the user, a pipe being root's 0600.)
        let copy = "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); sys.stderr.buffer.write(d[:4096])"
        let copied = try Self.run(user, setup, ["--camera", "--", "/usr/bin/python3", "-c", copy], input: input)
        #expect(copied.status == 0, "\(copied.stderr.prefix(500))")
        #expect(copied.stdout == input)
        // devaccess's own lines ("camera: granted ...") share standard error.
        #expect(Data(copied.stderr.utf8).range(of: input.prefix(128)) != nil)
    }

    @Test func exitStatusesAndDeathBySignalAreRelayedLikeAShell() throws {
        let setup = try Self.setup()
        let user = try TestUser("runexit")
        for code in [0, 1, 42] {
            let result = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c", "exit \(code)"])
            #expect(result.status == Int32(code), "\(result.stderr)")
        }
        let killed = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c", "kill -TERM $$"])
        #expect(killed.status == 128 + SIGTERM, "\(killed.stderr)")
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true).map { $0.endStatus ?? "-" }
        #expect(runs == ["exited 0", "exited 1", "exited 42", "signal 15"], "\(runs)")
    }

    /// A run's grant tells its end as `request` and `list` do (issue 31): local time and the
    /// time left, not the broker's ISO UTC text.
    @Test func aRunsGrantTellsItsEndInLocalTimeWithTheTimeLeft() throws {
        let setup = try Self.setup()
        let user = try TestUser("runends")
        let run = try Self.run(user, setup, ["--camera", "--for", "1h", "--", "/bin/true"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("devaccess: camera: allowed") && run.stderr.contains(" left"), "\(run.stderr)")
        #expect(run.stderr.range(of: #"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z"#, options: .regularExpression) == nil,
                "\(run.stderr)")
    }

    /// A run without a permission named (and no [Program] section) is a usage error naming the
    /// options; a program not found is 127 and one that cannot be run 126, as in a shell.
    @Test func usageAndMissingProgramExitAsAShellWould() throws {
        let setup = try Self.setup()
        let user = try TestUser("runusage")
        let bare = try Self.run(user, setup, ["--", "true"])
        #expect(bare.status == 64, "\(bare.stderr)")
        #expect(bare.stderr.contains("--camera, --microphone, --location") && !bare.stderr.contains("bad-message"),
                "\(bare.stderr)")
        let missing = try Self.run(user, setup, ["--camera", "--", "devaccess-no-such-program"])
        #expect(missing.status == 127 && missing.stderr.contains("not found in PATH"), "\(missing.stderr)")
        let missingPath = try Self.run(user, setup, ["--camera", "--", "/nonexistent/program"])
        #expect(missingPath.status == 127, "\(missingPath.stderr)")
        let notExecutable = try Self.run(user, setup, ["--camera", "--", "/etc/passwd"])
        #expect(notExecutable.status == 126, "\(notExecutable.stderr)")
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: true).isEmpty, "nothing was run")
    }

    @Test func ldPreloadAndOtherCodeInjectingVariablesDoNotReachTheProgram() throws {
        let setup = try Self.setup()
        let user = try TestUser("runenv")
        let result = try Self.run(user, setup, ["--camera", "--", "/usr/bin/env"], environment: [
            "LD_PRELOAD": "/nonexistent/inject.so", "LD_LIBRARY_PATH": "/tmp", "GCONV_PATH": "/tmp",
            "PYTHONPATH": "/tmp", "GST_PLUGIN_PATH": "/tmp", "KEPT_VARIABLE": "kept value", "TZ": "Europe/Paris",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let environment = String(decoding: result.stdout, as: UTF8.self)
        for name in ["LD_PRELOAD", "LD_LIBRARY_PATH", "GCONV_PATH", "PYTHONPATH", "GST_PLUGIN_PATH"] {
            #expect(!environment.contains(name + "="), "\(name) reached the program")
        }
        // Only listed variables are kept (issue 27): an ordinary listed one reaches the program,
        // an unlisted one is removed and named as removed.
        #expect(environment.contains("TZ=Europe/Paris"), "\(environment)")
        #expect(!environment.contains("KEPT_VARIABLE="), "\(environment)")
        let started = try setup.ledger().events().map(\.event).first { $0.type == .runStart }
        #expect(started?.details["removed_environment"]?.contains("LD_PRELOAD") == true)
        #expect(started?.details["removed_environment"]?.contains("KEPT_VARIABLE") == true)
    }

    /// The environment was cleaned by a list of what to drop: loaders it did not name reached
    /// the program (libasound's ALSA_PLUGIN_DIR, ALSA_MIXER_SIMPLE_MODULES and ALSA_CONFIG_UCM2,
    /// libglvnd's __GLX_VENDOR_LIBRARY_NAME, GI_TYPELIB_PATH, a D-Bus address that runs a
    /// program). Now only listed variables are kept, the D-Bus address only as a socket under
    /// the user's runtime directory.
    @Test func loadersNoListNamedDoNotReachTheProgram() throws {
        let setup = try Self.setup()
        let user = try TestUser("runloader")
        let loaders = ["ALSA_PLUGIN_DIR": "/tmp/alsa", "ALSA_MIXER_SIMPLE_MODULES": "/tmp/mixer",
                       "ALSA_CONFIG_UCM2": "/tmp/ucm2", "__GLX_VENDOR_LIBRARY_NAME": "../../tmp/evil",
                       "GI_TYPELIB_PATH": "/tmp/typelib", "DBUS_SESSION_BUS_ADDRESS": "unixexec:path=/tmp/evil"]
        let result = try Self.run(user, setup, ["--camera", "--", "/usr/bin/env"],
                                  environment: loaders.merging(["TZ": "Europe/Berlin"]) { old, _ in old })
        #expect(result.status == 0, "\(result.stderr)")
        let environment = String(decoding: result.stdout, as: UTF8.self)
        for name in loaders.keys.sorted() {
            #expect(!environment.contains(name + "="), "\(name) reached the program: \(environment)")
        }
        #expect(environment.contains("TZ=Europe/Berlin") && environment.contains("LANG=C.UTF-8"), "\(environment)")
        let started = try setup.ledger().events().map(\.event).first { $0.type == .runStart }
        #expect(started?.details["removed_environment"]?.contains("ALSA_PLUGIN_DIR") == true)
    }

    @Test func ctrlCOnThePtyReachesTheProgram() throws {
        let setup = try Self.setup()
        let user = try TestUser("runpty")
        let script = "trap 'echo got-INT; exit 5' INT; echo ready; while :; do sleep 0.1; done"
        let run = try user.onTerminal(["run", "--socket", setup.daemon.socketPath, "--camera", "--", "/bin/sh", "-c",
                                       script], answers: [(expect: "ready", type: "\u{03}")])
        #expect(run.output.contains("got-INT"), "\(run.output)")
        #expect(run.exit == 5, "\(run.output)")
    }

    @Test func strictKeepsTheProgramFromANodeItsUsersGroupOpens() throws {
        let setup = try Self.setup()
        let user = try TestUser("runstrict")
        let audio = try TestGroup("runaudio", members: [user])
        // The microphone node opens for the group, as /dev/snd/* does for group audio.
        #expect(chown(setup.microphone, 0, audio.gid) == 0 && chmod(setup.microphone, 0o660) == 0)
        let probe = ["/bin/sh", "-c", "( exec 3<>\"$1\" ) && echo opened || echo refused", "sh", setup.microphone]
        let loose = try Self.run(user, setup, ["--camera", "--"] + probe)
        #expect(String(decoding: loose.stdout, as: UTF8.self) == "opened\n", "\(loose.stderr)")
        let strict = try Self.run(user, setup, ["--camera", "--strict", "--"] + probe)
        #expect(strict.status == 0, "\(strict.stderr)")
        #expect(String(decoding: strict.stdout, as: UTF8.self) == "refused\n", "\(strict.stderr)")
        // What it was given still opens under --strict.
        let camera = try Self.run(user, setup, ["--camera", "--strict", "--", "/bin/sh", "-c", "exec 3<>\"$1\"", "sh",
                                                setup.camera])
        #expect(camera.status == 0, "\(camera.stderr)")
        let started = try setup.ledger().events().map(\.event).filter { $0.type == .runStart }
        #expect(started.contains { $0.details["strict"] == "true" })
    }

    /// Ctrl-Z and fg as a shell does them (SIGTSTP to devaccess, later SIGCONT), a window size
    /// change, and SIGTERM: each reaches the program.
    @Test func stopContinueWindowChangeAndTerminateReachTheProgram() throws {
        let setup = try Self.setup()
        let user = try TestUser("runsig")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let pidFile = marks.path + "/pid", winch = marks.path + "/winch", ready = marks.path + "/ready"
        let background = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
            "trap 'echo winch >> \"$2\"' WINCH; echo $$ > \"$1\"; : > \"$3\"; while :; do sleep 0.05; done",
            "sh", pidFile, winch, ready])
        let cli = background.process.processIdentifier
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: ready) } != nil)
        let program = try #require(Int32(((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        func state(_ pid: Int32) -> Character? { ProcessTable.entry(pid)?.state }
        #expect(kill(cli, SIGTSTP) == 0)
        #expect(LiveEnforcementTests.waitFor(5) { state(program) == "T" && state(cli) == "T" } != nil,
                "program \(String(describing: state(program))), devaccess \(String(describing: state(cli)))")
        #expect(kill(cli, SIGCONT) == 0)
        #expect(LiveEnforcementTests.waitFor(5) { state(program) != "T" && state(cli) != "T" } != nil)
        #expect(kill(cli, SIGWINCH) == 0)
        #expect(LiveEnforcementTests.waitFor(5) { FileManager.default.fileExists(atPath: winch) } != nil)
        #expect(kill(cli, SIGTERM) == 0)
        let (status, _, stderr) = background.finish()
        #expect(status == 128 + SIGTERM, "\(stderr)")
    }

    @Test func theAuditSummaryCountsRunsAndTheirTime() throws {
        let setup = try Self.setup()
        let user = try TestUser("runaudit")
        let result = try Self.run(user, setup, ["--camera", "--", "/bin/sleep", "1.2"])
        #expect(result.status == 0, "\(result.stderr)")
        let summary = try Self.admin(setup, ["audit", "--summary", "--format", "json", "--user", user.name])
        #expect(summary.status == 0, "\(summary.stderr)")
        let total = try #require(((try json(summary.stdout))["summary"] as? [String: Any])?["total"] as? [String: Any])
        #expect(total["runs"] as? Int == 1, "\(total)")
        #expect(total["runSeconds"] as? Int == 1, "\(total)")
    }

    // MARK: - The decision

    @Test func withNoDecisionAndNoTrustedChannelNothingRunsAndNothingIsRecorded() throws {
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("runask")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let ran = marks.path + "/ran"
        let result = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c", ": > \"$1\"", "sh", ran])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: ran))
        #expect(try setup.grants(user).isEmpty)
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: true).isEmpty)
    }

    /// "No terminal to ask on" is one exit code, 77, for `request` as for `run` (issue 31:
    /// `request` said 1, which a run's program may exit with too).
    @Test func noTerminalToAskOnIs77ForRequestAsForRun() throws {
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("noterm")
        let request = try user.withoutTerminal(["request", "camera"] + setup.socket)
        #expect(request.status == 77, "\(request.stderr)")
        #expect(request.stderr.contains("cannot ask for consent"), "\(request.stderr)")
        let run = try Self.run(user, setup, ["--camera", "--", "/bin/true"])
        #expect(run.status == 77, "\(run.stderr)")
        #expect(try setup.grants(user).isEmpty)
    }

    /// The trusted channel: devaccessd asks on the user's login terminal, naming the program
    /// it will start; "once" lasts for that run and ends with it.
    @Test func consentOnTheLoginTerminalNamesTheProgramAndOnceEndsWithTheRun() throws {
        let settings = try TerminalSettings(legacyTIOCSTI: 0)
        defer { settings.restore() }
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("lrun", shell: "/bin/sh")
        let shell = CanonicalPath.orGiven("/bin/sh")
        let run = try LoginTerminal.run(user: user, command: [TestProcess.devaccessBinary, "run"] + setup.socket
                                            + ["--camera", "--reason", "video call", "--", "/bin/sh", "-c",
                                               "exec 3<>\"$1\" && echo held-it", "sh", setup.camera],
                                        answers: [("within", "allow camera once \(shell.split(separator: "/").last ?? "") {code}\n")],
                                        timeout: 90)
        #expect(run.exitStatus == 0, "\(run.output)")
        #expect(run.output.contains("Allow \(shell), run by \(user.name), to use the camera?"), "\(run.output)")
        #expect(run.output.contains("reason: video call"), "\(run.output)")
        #expect(run.output.contains("held-it"), "\(run.output)")
        let grants = try setup.grants(user)
        #expect(grants.count == 1, "\(grants)")
        let grant = try #require(grants.first)
        #expect(grant.method == .consent && grant.scope == .once && grant.program?.path == shell, "\(grant)")
        #expect(grant.revoked != nil, "once ends with the run")
        #expect(try Self.runEntries(setup.camera).isEmpty)
        #expect(try !user.canOpen(setup.camera, .read))
    }

    /// A run's answer names its program; naming fewer permissions than the run asked for
    /// grants nothing the run could start with: the run does not start, nothing is recorded
    /// (issue 27 item 2). The old form names no program and is no answer.
    @Test func aRunAnsweredForPartOfWhatItAsksDoesNotStart() throws {
        let settings = try TerminalSettings(legacyTIOCSTI: 0)
        defer { settings.restore() }
        let setup = try Self.setup("[camera]\nDefault=ask\n[microphone]\nDefault=ask\n")
        let user = try TestUser("lrunpart", shell: "/bin/sh")
        let name = CanonicalPath.orGiven("/bin/sh").split(separator: "/").last ?? ""
        let run = try LoginTerminal.run(user: user, command: [TestProcess.devaccessBinary, "run"] + setup.socket
                                            + ["--camera", "--microphone", "--", "/bin/sh", "-c", "echo $((6 * 7))-ran"],
                                        answers: [("within", "allow camera microphone once {code}\n"),
                                                  ("not an answer", "allow camera once \(name) {code}\n")],
                                        timeout: 90)
        #expect(run.answered == 2, "\(run.output)")
        #expect(run.output.contains("allow camera microphone once \(name) "), "the question shows the whole answer: \(run.output)")
        #expect(!run.output.contains("42-ran"), "\(run.output)")
        #expect(run.exitStatus != 0, "\(run.output)")
        #expect(run.output.contains("the answer typed did not name microphone"), "\(run.output)")
        #expect(!run.output.contains("breaks the protocol"), "\(run.output)")
        #expect(try setup.grants(user).isEmpty, "\(run.output)")
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: true).isEmpty)
    }

    @Test func aPolicyDenialRefusesTheRun() throws {
        let setup = try Self.setup("[camera]\nDefault=deny\n")
        let user = try TestUser("rundeny")
        let result = try Self.run(user, setup, ["--camera", "--", "/bin/true"])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("restricted") || result.stderr.contains("policy"), "\(result.stderr)")
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: true).isEmpty)
    }

    @Test func aRunWhoseProgramIgnoresSIGHUPDoesNotOutliveADaemonRestartWithItsAccess() throws {
        let setup = try Self.setup()
        let user = try TestUser("runrestart")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let opened = marks.path + "/opened", pidFile = marks.path + "/pid"
        let background = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
            "trap '' HUP; echo $$ > \"$2\"; exec 3<>\"$1\" || exit 9; : > \"$3\"; while :; do sleep 0.1; done",
            "sh", setup.camera, pidFile, opened])
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: opened) } != nil)
        // Written before the node is opened (and `opened` made), so it is complete by now.
        let program = try #require(Int32(((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        try setup.restart()
        _ = background.finish()
        // The new daemon ends what the old one started: the program, its entry, its run.
        #expect(LiveEnforcementTests.waitFor(10) { kill(program, 0) != 0 } != nil, "the run's program survived")
        #expect(try Self.runEntries(setup.camera).isEmpty)
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.count == 1 && runs.allSatisfy { $0.ended != nil }, "\(runs)")
        #expect(try setup.grants(user).allSatisfy { $0.revoked != nil })
    }

    /// Where nobody the requester cannot drive can be asked, `run` takes a password and says
    /// why as `request` does (the consent channel's own reason), not a fixed sentence.
    @Test func aRunsPasswordPromptSaysWhyNoOneCouldBeAsked() throws {
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("runwhy")
        let asked = try user.onTerminal(["run", "--camera"] + setup.socket + ["--", "/bin/true"],
                                        answers: [("Password", "\u{4}")])
        #expect(asked.output.contains("cannot ask you where only you can answer"), "\(asked.output)")
        #expect(asked.output.contains("not in a login session"), "\(asked.output)")
        #expect(!asked.output.contains("no login terminal to ask on"), "\(asked.output)")
        #expect(try setup.grants(user).isEmpty, "a dismissed password prompt grants nothing")
        #expect(try !user.canOpen(setup.camera, .read))
    }

    @Test func aProgramSectionDeclaresWhatARunWithoutFlagsAsksFor() throws {
        let setup = try Self.setup("[camera]\nDefault=allow\n[Program]\nPath=/bin/sh\nPermissions=camera\n")
        let user = try TestUser("runsect")
        let declared = try Self.run(user, setup, ["/bin/sh", "-c", "exec 3<>\"$1\"", "sh", setup.camera])
        #expect(declared.status == 0, "\(declared.stderr)")
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.first?.permissions == [.camera], "\(runs)")
        let undeclared = try Self.run(user, setup, ["/usr/bin/env"])
        #expect(undeclared.status == 64, "\(undeclared.stderr)")
        #expect(undeclared.stderr.contains("[Program]"), "\(undeclared.stderr)")
    }

    /// A run refused at once changes nothing and asks nobody: a user repeating it cannot grow
    /// the audit trail without bound (the same attempt budget as requests).
    @Test func aFloodOfRefusedRunsIsAuditedWithinTheAttemptBudget() throws {
        let setup = try Self.setup("[camera]\nDefault=deny\n")
        let user = try TestUser("runflood")
        for _ in 0..<40 {
            let refused = try Self.run(user, setup, ["--camera", "--", "/bin/true"])
            #expect(refused.status == 77, "\(refused.stderr)")
        }
        let recorded = try setup.ledger().events().map(\.event)
            .filter { $0.subject?.uid == user.uid || $0.actor?.uid == user.uid }
        // 40 refusals, 2 events each, would be 80 rows; the budget lets about 20 through a minute.
        #expect(recorded.count <= 24, "\(recorded.count) events for 40 refused runs")
        #expect(recorded.count >= 2, "the first refusals are recorded")
    }

    // MARK: - Program grants

    /// Root's CLI through the daemon.
    static func admin(_ setup: RequestSetup, _ arguments: [String]) throws -> ProcessOutput {
        try TestProcess.devaccess(arguments + setup.socket, environment: ["DEVACCESS_TEST_DEVICES": setup.devices])
    }

    @Test func anAdminProgramGrantLetsRunsOfThatProgramInAndNothingElseOfTheUser() throws {
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("runprog")
        let shell = try #require(CanonicalPath.of("/bin/sh"))
        let granted = try Self.admin(setup, ["grant", "camera", "--user", user.name, "--program", "/bin/sh"])
        #expect(granted.status == 0, "\(granted.stderr)")
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.program?.path == shell, "the grant names the canonical path: \(grant)")
        // No user entry: the user's own processes stay out.
        #expect(try !user.canOpen(setup.camera, .read))
        let run = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c", "exec 3<>\"$1\"", "sh", setup.camera])
        #expect(run.status == 0, "the program grant did not let the run in: \(run.stderr)")
        // Another program of the same user needs its own decision (here: none can be asked).
        let other = try Self.run(user, setup, ["--camera", "--", "/usr/bin/python3", "-c",
                                               "import sys; open(sys.argv[1], 'r+b')", setup.camera])
        #expect(other.status == 77, "\(other.stderr)")
        // A program grant for a file its user could change would stand for any code: refused.
        let scripts = try TemporaryDirectory()
        let own = scripts.path + "/camera-app"
        try Data("#!/bin/sh\n".utf8).write(to: URL(fileURLWithPath: own))
        #expect(chown(own, user.uid, user.gid) == 0 && chmod(own, 0o755) == 0)
        let refused = try Self.admin(setup, ["grant", "camera", "--user", user.name, "--program", own])
        #expect(refused.status == 77, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains("owned by uid \(user.uid)"), "\(refused.stderr)")
        // The admin's revoke of that program's grant ends it; runs of the program are refused again.
        let revoked = try Self.admin(setup, ["revoke", "camera", "--user", user.name, "--program", "/bin/sh"])
        #expect(revoked.status == 0, "\(revoked.stderr)")
        let again = try Self.run(user, setup, ["--camera", "--", "/bin/sh", "-c", "exec 3<>\"$1\"", "sh", setup.camera])
        #expect(again.status == 77, "\(again.stderr)")
    }

    @Test func revokeTerminateEndsTheRunAndWhatItLeftBehind() throws {
        let setup = try Self.setup("[camera]\nDefault=ask\n")
        let user = try TestUser("runterm")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let opened = marks.path + "/opened", pidFile = marks.path + "/leftover"
        #expect(try Self.admin(setup, ["grant", "camera", "--user", user.name, "--program", "/bin/sh", "--always"])
            .status == 0)
        // The run holds the camera and leaves a setsid'd child that ignores SIGTERM.
        let background = try Self.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
            "setsid /bin/sh -c 'trap \"\" TERM; echo $$ > \"$1\"; exec sleep 60' sh \"$2\" </dev/null >/dev/null 2>&1 & "
                + "exec 3<>\"$1\" || exit 9; : > \"$3\"; exec sleep 60", "sh", setup.camera, pidFile, opened])
        func leftoverPid() -> Int32? {
            Int32(((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines))
        }
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: opened) && leftoverPid() != nil }
            != nil)
        let leftover = try #require(leftoverPid())
        let revoked = try Self.admin(setup, ["revoke", "camera", "--user", user.name, "--terminate", "--json"])
        #expect(revoked.status == 0, "\(revoked.stderr)")
        #expect(revoked.stdout.contains("\"terminated\""), "\(revoked.stdout)")
        let (status, _, stderr) = background.finish()
        #expect(status == 128 + SIGTERM, "\(stderr)")
        // The leftover that ignored SIGTERM was killed too.
        #expect(LiveEnforcementTests.waitFor(10) { kill(leftover, 0) != 0 } != nil, "process \(leftover) survived")
        #expect(LiveEnforcementTests.waitFor(5) { (try? Self.runEntries(setup.camera).isEmpty) ?? false } != nil)
    }

    // MARK: - Helpers


    struct Background {
        let process: Process
        let stderr: Pipe

        func finish() -> (status: Int32, stdout: Data, stderr: String) {
            process.waitUntilExit()
            let error = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            return (process.terminationStatus, Data(), error)
        }
    }

    static func runInBackground(_ user: TestUser, _ setup: RequestSetup, _ arguments: [String]) throws -> Background {
        let process = Process()
        // setpriv execs the CLI: the Process's pid is the CLI's (tests signal it).
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--",
                             TestProcess.devaccessBinary, "run", "--socket", setup.daemon.socketPath] + arguments
        process.environment = ["PATH": "/usr/bin:/bin", "DEVACCESS_TEST_DEVICES": setup.devices]
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let stderr = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr
        try process.run()
        return Background(process: process, stderr: stderr)
    }
}
