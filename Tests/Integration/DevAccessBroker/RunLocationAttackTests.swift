import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `devaccess run --location`, attacked by the run's own user: devaccessd as root, gpsd
/// fed by gpsfake, the gpsd endpoint on a port of its own, real users. The policy allows
/// location to python only (a `Program=` rule; everyone else is asked), so the user has no
/// level of their own: whatever an outside process is served, it got from the run.
@Suite(.serialized, .enabled(if: isRoot && GpsFakeProcess.isInstalled,
                             "starts devaccessd as root; needs gpsfake (apt-get install gpsd gpsd-clients)"))
struct RunLocationAttackTests {
    static let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path

    final class Setup {
        let gpsd: GpsFakeProcess
        let port: UInt16
        let requests: RequestSetup
        let marks: TemporaryDirectory

        /// `program`: the one program the policy allows location (everyone else is asked).
        init(program: String = RunLocationAttackTests.python) throws {
            gpsd = try GpsFakeProcess(cycling: LocationAttackTests.fixture)
            port = try freeLoopbackPort()
            requests = try RequestSetup(
                policy: "[camera]\nDefault=allow\n[location]\nDefault=ask\n"
                    + "[Rule]\nPermission=location\nProgram=\(program)\nAction=allow\n",
                daemonArguments: ["--gpsd", "127.0.0.1:\(gpsd.port)", "--gpsd-timeout", "2000",
                                  "--location-port", String(port)],
                location: true)
            marks = try TemporaryDirectory()
            chmod(marks.path, 0o777)
        }

        deinit { gpsd.stop() }

        func mark(_ name: String) -> String { marks.path + "/" + name }

        /// The JSON a script wrote to mark `name`, once it is there (up to `seconds`).
        func report(_ name: String, within seconds: Double = 40) -> [String: Any]? {
            let found = LiveEnforcementTests.waitFor(seconds) { FileManager.default.fileExists(atPath: self.mark(name)) }
            guard found != nil, let data = FileManager.default.contents(atPath: mark(name)) else { return nil }
            return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        }

        func say(_ name: String) { _ = FileManager.default.createFile(atPath: mark(name), contents: nil) }
    }

    /// Python for both sides: `watch` WATCHes and counts TPV reports with a position (and
    /// whether an ERROR came) until `want` or `seconds`; `say` writes a report atomically.
    static let helpers = #"""
        import json, os, socket, sys, time
        def watch(s, want, seconds):
            s.settimeout(1)
            s.sendall(b'?WATCH={"enable":true,"json":true};\n')
            buffer, tpv, error = b"", 0, False
            deadline = time.monotonic() + seconds
            while tpv < want and time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    report = json.loads(line)
                    if report.get("class") == "TPV" and "lat" in report:
                        tpv += 1
                    if report.get("class") == "ERROR":
                        error = True
            return {"tpv": tpv, "error": error}
        def say(path, document):
            with open(path + ".tmp", "w") as f:
                json.dump(document, f)
            os.rename(path + ".tmp", path)
        def wait_for(path, seconds=60):
            deadline = time.monotonic() + seconds
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.05)
        port, marks = int(sys.argv[1]), sys.argv[2]

        """#

    /// The run's program in the simplest case: watch, report, hold on until told.
    static let ownConnection = helpers + #"""
        s = socket.create_connection(("127.0.0.1", port))
        say(marks + "/run", watch(s, 2, 20))
        wait_for(marks + "/done")
        """#

    /// (a) The run's program gets fixes; the same user's process outside it, connecting at
    /// the same time, gets nothing.
    @Test func theRunsProgramIsServedWhileTheSameUsersOtherProcessIsNot() throws {
        let setup = try Setup()
        let user = try TestUser("rlocown")
        let run = try RunTests.runInBackground(user, setup.requests, [
            "--location", "--accuracy", "street", "--", Self.python, "-c", Self.ownConnection, String(setup.port),
            setup.marks.path,
        ])
        let served = setup.report("run")
        let outside = try user.python(Self.helpers + #"""
            s = socket.create_connection(("127.0.0.1", port))
            print(json.dumps(watch(s, 1, 8)))
            """#, [String(setup.port), setup.marks.path])
        setup.say("done")
        let (status, _, stderr) = run.finish()
        #expect(status == 0, "\(stderr) \(setup.requests.daemon.log)")
        #expect(served?["tpv"] as? Int == 2, "the run's program was not served: \(served ?? [:]) \(stderr)")
        let refused = try? json(outside.stdout)
        #expect(refused?["tpv"] as? Int == 0, "a process outside the run was served: \(outside.stdout) \(outside.stderr)")
        // The run's grant records the level asked, bound to the run.
        let grants = try setup.requests.grants(user).filter { $0.permission == .location }
        #expect(grants.count == 1 && grants.first?.accuracy == .street && grants.first?.program != nil, "\(grants)")
        // The refused outsider is in the audit trail (the endpoint reports it; the lookup,
        // repeated for the run's connections, audits no refusal itself).
        let refusals = try setup.requests.ledger().events().map(\.event).filter {
            $0.type == .refused && $0.details["operation"] == "location" && $0.subject?.uid == user.uid
                && $0.details["program_problem"]?.contains("outside the user's runs") == true
        }
        #expect(refusals.count == 1, "\(refusals)")
    }

    /// (b) The run's program hands a socket to an outside process, which connects it: a new
    /// connection that process holds (with or without the run keeping its copy) is not
    /// served at the run's level.
    @Test(arguments: ["keep", "close"])
    func aSocketTheRunHandsOutIsNotServedAtTheRunsLevel(_ copy: String) throws {
        let setup = try Setup()
        let user = try TestUser("rlochand")
        let outside = try user.background(Self.helpers + #"""
            l = socket.socket(socket.AF_UNIX)
            l.bind(marks + "/handoff")
            l.listen(1)
            print(json.dumps({"listening": True}), flush=True)
            c, _ = l.accept()
            _, fds, _, _ = socket.recv_fds(c, 16, 1)
            t = socket.socket(fileno=fds[0])
            t.connect(("127.0.0.1", port))
            print(json.dumps(watch(t, 1, 8)), flush=True)
            """#, [String(setup.port), setup.marks.path])
        defer { outside.stop() }
        #expect(outside.report["listening"] as? Bool == true, "\(outside.report)")
        let run = try RunTests.runInBackground(user, setup.requests, [
            "--location", "--", Self.python, "-c", Self.helpers + #"""
            u = socket.socket(socket.AF_UNIX)
            u.connect(marks + "/handoff")
            t = socket.socket(socket.AF_INET)
            socket.send_fds(u, [b"x"], [t.fileno()])
            if sys.argv[3] == "close":
                t.close()
            own = socket.create_connection(("127.0.0.1", port))
            say(marks + "/run", watch(own, 1, 20))
            wait_for(marks + "/done")
            """#, String(setup.port), setup.marks.path, copy,
        ])
        let handed = try outside.nextReport(timeout: 40)
        let own = setup.report("run")
        setup.say("done")
        let (status, _, stderr) = run.finish()
        #expect(status == 0, "\(stderr)")
        // The run itself is served: the grant is there to be had.
        #expect(own?["tpv"] as? Int == 1, "the run's own connection was not served: \(own ?? [:])")
        #expect(handed != nil && handed?["tpv"] as? Int == 0,
                "the socket handed out (\(copy)) was served at the run's level: \(handed ?? [:])")
    }

    /// (c) A connection of the run, kept open by a process the program leaves behind, is
    /// cut when the run ends.
    @Test func theRunsConnectionIsCutWhenTheRunEnds() throws {
        let setup = try Setup()
        let user = try TestUser("rlocend")
        let (status, _, stderr) = try RunTests.run(user, setup.requests, [
            "--location", "--", Self.python, "-c", Self.helpers + #"""
            s = socket.create_connection(("127.0.0.1", port))
            first = watch(s, 1, 20)
            if os.fork() == 0:
                os.setsid()
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                start, deadline = time.monotonic(), time.monotonic() + 30
                closed, error = False, False
                while time.monotonic() < deadline:
                    try:
                        chunk = s.recv(65536)
                    except socket.timeout:
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        closed = True
                        break
                    error = error or b'"class":"ERROR"' in chunk
                say(marks + "/left", {"first": first, "closed": closed, "error": error,
                                      "after": time.monotonic() - start})
                os._exit(0)
            """#, String(setup.port), setup.marks.path,
        ])
        #expect(status == 0, "\(stderr)")
        let left = setup.report("left")
        let first = left?["first"] as? [String: Any]
        #expect(first?["tpv"] as? Int == 1, "the run was never served: \(left ?? [:])")
        #expect(left?["closed"] as? Bool == true, "the connection outlived the run: \(left ?? [:])")
        #expect(try setup.requests.ledger().runs(uid: user.uid).isEmpty)
    }

    /// (d) A run given the camera but not location: its program gets no fixes.
    @Test func aRunWithoutLocationGetsNothing() throws {
        let setup = try Setup()
        let user = try TestUser("rlocnone")
        let (status, _, stderr) = try RunTests.run(user, setup.requests, [
            "--camera", "--", Self.python, "-c", Self.helpers + #"""
            s = socket.create_connection(("127.0.0.1", port))
            say(marks + "/run", watch(s, 1, 8))
            """#, String(setup.port), setup.marks.path,
        ])
        #expect(status == 0, "\(stderr)")
        let served = setup.report("run", within: 5)
        #expect(served != nil && served?["tpv"] as? Int == 0, "a run without location was served: \(served ?? [:])")
    }
}
