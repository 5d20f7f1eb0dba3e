import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `devaccess run --location`, attacked by a process of the run's user that is not in the
/// run and has no location of its own. The policy gives location to `/usr/bin/sleep`
/// alone: a program that never opens a socket, so whatever the attacker is served it got
/// by borrowing the run's level, not from anything the run's program did.
@Suite(.serialized, .enabled(if: isRoot && GpsFakeProcess.isInstalled,
                             "starts devaccessd as root; needs gpsfake (apt-get install gpsd gpsd-clients)"))
struct RunLocationHostileTests {
    static let sleep = URL(fileURLWithPath: "/usr/bin/sleep").resolvingSymlinksInPath().path

    /// RunLocationAttackTests' setup, with location allowed to `sleep` alone.
    typealias Setup = RunLocationAttackTests.Setup

    /// The attacker: starts `sleep 60` as a run with location, speaking the protocol itself,
    /// and gives it an unconnected TCP socket of its own as stdin (a program's stdin is
    /// whatever its caller says). The socket is then connected to the endpoint while the
    /// attacker's own copy is out of the scan's sight:
    /// - `parked`: right after connect() it goes into a socketpair's queue (in flight in an
    ///   SCM_RIGHTS message, held by nobody) and the attacker closes its copy; once the scan
    ///   is over it is taken back.
    /// - `thread`: a thread with a descriptor table of its own (unshare(CLONE_FILES))
    ///   keeps the copy; the scan reads only the thread-group leader's /proc/PID/fd.
    /// - `leader`: the main thread exits (the leader is a zombie while the other thread
    ///   runs): /proc/PID/fd lists nothing and the scan skips exited processes.
    /// In every case the scan sees one holder, the run's sleep, and only that.
    static let attacker = RunLocationAttackTests.helpers + #"""
        import ctypes, threading
        libc = ctypes.CDLL(None, use_errno=True)
        broker, program, how = sys.argv[3], sys.argv[4], sys.argv[5]
        t = socket.socket(socket.AF_INET)
        null = os.open("/dev/null", os.O_RDWR)
        c = socket.socket(socket.AF_UNIX)
        c.connect(broker)
        run = {"version": 1, "id": 1, "type": "run", "program": program, "arguments": ["sleep", "60"],
               "environment": ["PATH=/usr/bin:/bin"], "directory": "/", "umask": 18,
               "permissions": ["location"], "accuracy": "exact"}
        socket.send_fds(c, [json.dumps(run).encode() + b"\n"], [t.fileno(), null, null])
        line = b""
        while not line.endswith(b"\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            line += chunk
        started = json.loads(line.split(b"\n")[0])
        if started.get("type") != "run-started":
            print(json.dumps({"tpv": -1, "reply": started}), flush=True)
            sys.exit(1)
        os.close(null)
        result = {}
        if how == "parked":
            a, b = socket.socketpair()
            t.setblocking(False)
            t.connect_ex(("127.0.0.1", port))
            socket.send_fds(a, [b"p"], [t.fileno()])
            os.close(t.detach())
            time.sleep(3)
            _, fds, _, _ = socket.recv_fds(b, 16, 1)
            s = socket.socket(fileno=fds[0])
            s.setblocking(True)
            result = watch(s, 2, 20)
        elif how == "thread":
            ready = threading.Event()
            fd = t.fileno()
            def hidden():
                if libc.unshare(0x400) != 0:  # CLONE_FILES: a descriptor table of its own
                    result["unshare"] = ctypes.get_errno()
                ready.set()
                while not os.path.exists(marks + "/closed"):
                    time.sleep(0.05)
                s = socket.socket(fileno=fd)
                s.connect(("127.0.0.1", port))
                result.update(watch(s, 2, 20))
            th = threading.Thread(target=hidden)
            th.start()
            ready.wait()
            os.close(t.detach())  # the leader's table no longer has it
            open(marks + "/closed", "w").close()
            th.join()
        else:
            def hidden():
                time.sleep(1)  # the main thread is gone by then
                t.connect(("127.0.0.1", port))
                result.update(watch(t, 2, 20))
                print(json.dumps(result), flush=True)
                os._exit(0)
            threading.Thread(target=hidden).start()
            libc.syscall(60, 0)  # SYS_exit: this thread (the leader) only; ctypes let go of the GIL
        print(json.dumps(result), flush=True)
        os._exit(0)
        """#

    /// A same-user process outside the run, with no location of its own, connects a socket
    /// the run's program merely holds (its stdin) while hiding its own copy from the holder
    /// scan: it must not be served at the run's level (nor at all: it has no level).
    /// Today this holds only because devaccessd keeps its own copy of the three streams until
    /// the run ends (`run(_:envelope:peer:exchange:)`'s `defer`): root holds the socket too,
    /// so it is nobody's run's alone. With devaccessd closing them once the program is
    /// forked, the `parked` and `thread` cases were served exact fixes (2 TPVs each).
    @Test(arguments: ["parked", "thread", "leader"])
    func aSocketHiddenFromTheScanIsNotServedAtTheRunsLevel(_ how: String) throws {
        let setup = try Setup(program: Self.sleep)
        let user = try TestUser("rlochide")
        let marks = try TemporaryDirectory()
        chmod(marks.path, 0o777)
        let attack = try user.background(Self.attacker, [String(setup.port), marks.path,
                                                         setup.requests.daemon.socketPath, Self.sleep, how],
                                         reportWithin: 60)
        defer { attack.stop() }
        let outcome = attack.report
        #expect(outcome["tpv"] as? Int != -1, "the run did not start: \(outcome) \(setup.requests.daemon.log)")
        #expect(outcome["unshare"] == nil, "\(outcome)")
        #expect(outcome["tpv"] as? Int == 0,
                "(\(how)) a process outside the run was served at the run's level: \(outcome)")
    }

    /// The run hands a socket to an outside process and keeps its own copy (as
    /// RunLocationAttackTests' handed-socket test), but the outside process keeps the copy
    /// it receives out of /proc/PID/fd: received by a thread with a descriptor table of its
    /// own (`thread`), or by a thread whose leader has exited (`leader`). The scan then finds
    /// the run's copy alone.
    @Test(arguments: ["thread", "leader"])
    func aHandedSocketHiddenInAThreadIsNotServedAtTheRunsLevel(_ how: String) throws {
        let setup = try RunLocationAttackTests.Setup()
        let user = try TestUser("rlochthr")
        let outside = try user.background(RunLocationAttackTests.helpers + #"""
            import ctypes, threading
            libc = ctypes.CDLL(None, use_errno=True)
            how = sys.argv[3]
            l = socket.socket(socket.AF_UNIX)
            l.bind(marks + "/handoff")
            l.listen(1)
            lfd = l.detach()
            def hidden():
                if how == "thread":
                    if libc.unshare(0x400) != 0:
                        print(json.dumps({"unshare": ctypes.get_errno()}), flush=True)
                        os._exit(1)
                else:
                    time.sleep(1)  # the leader has exited by then
                print(json.dumps({"listening": True}), flush=True)
                listener = socket.socket(fileno=lfd)
                c, _ = listener.accept()
                _, fds, _, _ = socket.recv_fds(c, 16, 1)
                t = socket.socket(fileno=fds[0])
                t.connect(("127.0.0.1", port))
                print(json.dumps(watch(t, 1, 8)), flush=True)
                os._exit(0)
            threading.Thread(target=hidden).start()
            if how == "leader":
                libc.syscall(60, 0)
            while True:
                time.sleep(1)
            """#, [String(setup.port), setup.marks.path, how])
        defer { outside.stop() }
        #expect(outside.report["listening"] as? Bool == true, "\(outside.report)")
        let run = try RunTests.runInBackground(user, setup.requests, [
            "--location", "--", RunLocationAttackTests.python, "-c", RunLocationAttackTests.helpers + #"""
            u = socket.socket(socket.AF_UNIX)
            u.connect(marks + "/handoff")
            t = socket.socket(socket.AF_INET)
            socket.send_fds(u, [b"x"], [t.fileno()])
            own = socket.create_connection(("127.0.0.1", port))
            say(marks + "/run", watch(own, 1, 20))
            wait_for(marks + "/done")
            """#, String(setup.port), setup.marks.path,
        ])
        let handed = try outside.nextReport(timeout: 40)
        let own = setup.report("run")
        setup.say("done")
        let (status, _, stderr) = run.finish()
        #expect(status == 0, "\(stderr)")
        #expect(own?["tpv"] as? Int == 1, "the run's own connection was not served: \(own ?? [:])")
        #expect(handed != nil && handed?["tpv"] as? Int == 0,
                "the socket handed out and hidden (\(how)) was served at the run's level: \(handed ?? [:])")
    }
}
