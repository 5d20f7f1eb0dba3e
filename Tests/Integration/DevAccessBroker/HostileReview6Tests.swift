import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// The sixth hostile review (2026-12-07): an unprivileged local user, and processes it runs
/// in `devaccess run` and `devaccess run --strict`, against the engine lock, the gpsd
/// endpoint's lookups and its judging of who holds a connection.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct HostileReview6Tests {
    // MARK: attack 1: the engine lock

    /// Python as the attacker: every way to a descriptor of `engine.lock` it can think of
    /// (the path, devaccessd's own descriptors through /proc), each tried for a shared and
    /// an exclusive `flock`. Prints what it got.
    static let lockGrab = """
        import fcntl, json, os, sys
        lock, daemon = sys.argv[1], sys.argv[2]
        got = []
        def attempt(path, flags):
            try:
                fd = os.open(path, flags)
            except OSError as e:
                return "open: " + e.strerror
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got.append(path)
                return "locked"
            except OSError as e:
                return "flock: " + e.strerror
        tried = {}
        for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT):
            tried["%s %d" % (lock, flags)] = attempt(lock, flags)
        try:
            for n in os.listdir("/proc/%s/fd" % daemon):
                tried["fd " + n] = attempt("/proc/%s/fd/%s" % (daemon, n), os.O_RDONLY)
        except OSError as e:
            tried["/proc/%s/fd" % daemon] = e.strerror
        print(json.dumps({"locked": got, "tried": tried}), flush=True)
        """

    /// Attack 1: a user (a login's process, and a process of a strict run) tries to open the
    /// engine lock and hold it, so that devaccessd cannot start again and root's `--offline`
    /// repair is refused "devaccessd is running". The state directory is reachable as
    /// /var/lib/devaccess is (its parent 0755).
    @Test func neitherAUserNorAStrictRunCanOpenOrLockTheEngineLock() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("h6lock")
        let state = setup.stateDirectory
        #expect(chmod((state as NSString).deletingLastPathComponent, 0o755) == 0)
        let lock = state + "/" + Ledger.engineLockFileName
        var info = stat()
        #expect(stat(state, &info) == 0 && info.st_mode & 0o7777 == 0o700, "state directory mode \(info.st_mode)")
        #expect(stat(lock, &info) == 0 && info.st_mode & 0o7777 == 0o600 && info.st_uid == 0)

        let plain = try user.python(Self.lockGrab, [lock, String(setup.daemon.pid)])
        let plainResult = try json(plain.stdout)
        #expect((plainResult["locked"] as? [String])?.isEmpty == true, "a user locked the engine lock: \(plain.stdout)")

        let strict = try RunTests.run(user, setup, ["--camera", "--strict", "--", "/usr/bin/python3", "-c",
                                                    Self.lockGrab, lock, String(setup.daemon.pid)])
        let strictResult = try json(String(decoding: strict.stdout, as: UTF8.self))
        #expect((strictResult["locked"] as? [String])?.isEmpty == true,
                "a strict run locked the engine lock: \(String(decoding: strict.stdout, as: UTF8.self)) \(strict.stderr)")

        // Whatever they tried, nothing of theirs holds it: root's repair runs once devaccessd is
        // down, and devaccessd starts again.
        try setup.stop()
        let repair = try TestProcess.devaccess(["list", "--offline", "--state-dir", state] + setup.socket)
        #expect(repair.status == 0, "root's repair was refused: \(repair.stderr)")
        try setup.start()
    }

    /// Attack 1b: a state directory others can write (an administrator's `--state-dir` in a
    /// shared place made with the wrong umask). The user plants `engine.lock` there before devaccessd
    /// first starts and holds a lock on it: devaccessd and root's `--offline` took the user's
    /// file for the lock and said "devaccessd is running", which sends root looking for a
    /// daemon that is not there.
    @Test func aLockFileAnotherUserPlantedIsNotTakenForTheEngineLock() throws {
        let user = try TestUser("h6plant")
        let scratch = try TemporaryDirectory()
        #expect(chmod(scratch.path, 0o755) == 0)
        let state = scratch.path + "/state"
        #expect(mkdir(state, 0o700) == 0)
        _ = try Ledger(path: state + "/" + Ledger.fileName, journal: .disabled)
        #expect(chmod(state, 0o777) == 0)
        let holder = try user.background("""
            import fcntl, json, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(json.dumps({"held": True}), flush=True)
            time.sleep(120)
            """, [state + "/" + Ledger.engineLockFileName])
        defer { holder.stop() }
        let repair = try TestProcess.devaccess(["list", "--offline", "--state-dir", state, "--socket",
                                                state + "/nobody.sock"])
        #expect(repair.status != 0)
        #expect(!repair.stderr.contains("devaccessd is running") && repair.stderr.contains("uid \(user.uid)"),
                "root was told another devaccess holds a lock file uid \(user.uid) planted: \(repair.stderr)")
    }

    // MARK: attack 2: flooding the gpsd endpoint

    /// Connects to the gpsd endpoint from subordinate uids 1...1000 in turn (inside
    /// `unshare --map-auto`, as root of the namespace), each from a thread of its own that
    /// takes the uid with the raw system calls (only that thread changes), up to `workers`
    /// at once, each connection closed at once, for `seconds`; prints how many it made.
    static let endpointFlood = """
        import ctypes, json, socket, sys, threading, time
        port, workers, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
        libc = ctypes.CDLL(None, use_errno=True)
        SETGROUPS, SETRESGID, SETRESUID = 116, 119, 117
        slots = threading.Semaphore(workers)
        made = [0]
        def one(u):
            try:
                if libc.syscall(SETGROUPS, 0, None) or libc.syscall(SETRESGID, u, u, u) \
                        or libc.syscall(SETRESUID, u, u, u):
                    return
                s = socket.create_connection(("127.0.0.1", port))
                s.close()
                made[0] += 1
            except OSError:
                pass
            finally:
                slots.release()
        deadline, u = time.monotonic() + seconds, 1
        while time.monotonic() < deadline:
            slots.acquire()
            threading.Thread(target=one, args=(u,), daemon=True).start()
            u = u % 1000 + 1
        time.sleep(1)
        print(json.dumps({"connections": made[0]}))
        """

    /// Another user's calls while the flood runs: `devaccess location` (the engine's queue, as
    /// every decision) and `devaccess status`, each given the CLI's own deadline; prints how many
    /// were answered and the slowest.
    static let otherUsersCalls = """
        import json, subprocess, sys, time
        cli, socket_path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
        deadline = time.monotonic() + seconds
        asked, answered, slowest, failures = 0, 0, 0.0, []
        while time.monotonic() < deadline:
            for command in (["location", "--json"], ["list", "--json"]):
                start = time.monotonic()
                asked += 1
                try:
                    done = subprocess.run([cli] + command + ["--socket", socket_path], capture_output=True, timeout=30)
                    if done.returncode == 0:
                        answered += 1
                    elif len(failures) < 3:
                        failures.append(done.stderr.decode()[-300:])
                except subprocess.TimeoutExpired:
                    failures.append("timed out: %s" % command)
                slowest = max(slowest, time.monotonic() - start)
            time.sleep(0.2)
        print(json.dumps({"asked": asked, "answered": answered, "slowest": slowest, "failures": failures}), flush=True)
        """

    static func residentKiB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }

    /// Attack 2: each new client's uid is looked up on the engine's queue and its runs read
    /// from the ledger, ended ones included. One person connects from a thousand subordinate
    /// uids in turn (each a lookup of its own: the per-uid cache and the one-lookup-per-uid
    /// rule do not see them as one), hanging up at once (the per-person client cap counts
    /// only clients still connected), with 20,000 ended runs in the ledger. Another user's
    /// `location` and `list` must still be answered within the CLI's deadline, and
    /// devaccessd's memory must not grow with the flood.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func floodingTheGpsdEndpointFromSubordinateUIDsDoesNotStarveOthers() throws {
        let setup = try RunLocationAttackTests.Setup()
        let mallory = try TestUser("h6flood")
        let bob = try TestUser("h6bob")
        let socket = setup.requests.socket
        #expect(try TestProcess.devaccess(["grant", "location", "--user", bob.name] + socket).status == 0)
        let ledgerPath = setup.requests.stateDirectory + "/" + Ledger.fileName
        let seeded = try TestProcess.run("/usr/bin/sqlite3", ["-cmd", ".timeout 10000", ledgerPath, """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
            INSERT INTO runs (subject_uid, user_name, program_path, permissions, gid, strict, started_usec, ended_usec,
                              end_status)
            SELECT \(mallory.uid), '\(mallory.name)', '/usr/bin/true', 'camera', 1, i % 2, 1, 2, 'exited 0' FROM n;
            """])
        try #require(seeded.status == 0, "\(seeded.stderr)")
        let daemon = setup.requests.daemon.pid
        // Served before the flood (and devaccessd has answered a location once).
        let warm = try bob.devaccess(["location", "--json"] + socket)
        #expect(warm.status == 0, "\(warm.stderr)")
        let before = Self.residentKiB(daemon)

        let first = 410_000_000 + (mallory.uid % 100_000) * 1_000
        let range = "\(first)-\(first + 999)"
        let added = try TestProcess.run("/usr/sbin/usermod", ["--add-subuids", range, "--add-subgids", range, mallory.name])
        try #require(added.status == 0, "\(added.stderr)")
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", range, "--del-subgids", range, mallory.name]) }
        let flood = Process()
        flood.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        flood.arguments = ["--reuid=\(mallory.uid)", "--regid=\(mallory.gid)", "--clear-groups", "--", "/usr/bin/unshare",
                           "--map-auto", "--map-user=0", "/usr/bin/python3", "-c", Self.endpointFlood,
                           String(setup.port), "32", "20"]
        let floodOutput = Pipe()
        flood.standardOutput = floodOutput
        try flood.run()
        defer { if flood.isRunning { kill(flood.processIdentifier, SIGKILL) } }
        usleep(2_000_000)
        let calls = try bob.python(Self.otherUsersCalls, [TestProcess.devaccessBinary, setup.requests.daemon.socketPath,
                                                          "15"])
        flood.waitUntilExit()
        let made = (try? json(String(decoding: floodOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)))?[
            "connections"] as? Int ?? -1
        let during = Self.residentKiB(daemon)
        usleep(3_000_000)
        let after = Self.residentKiB(daemon)
        let result = try json(calls.stdout)
        let figures = "flood: \(made) connections; bob: \(calls.stdout.trimmingCharacters(in: .newlines)); RSS KiB before \(before), end of flood "
            + "\(during), 3 s later \(after)"
        print("HostileReview6 flood figures: " + figures)
        #expect(made > 1000, "the flood did not run: \(figures)")
        #expect((result["asked"] as? Int ?? 0) > 0 && result["answered"] as? Int == result["asked"] as? Int,
                "another user was not answered while the endpoint was flooded: \(figures)")
        #expect(after - before < 100 * 1024, "devaccessd grew with the flood: \(figures)")
        // And the endpoint still serves him afterwards, at once.
        let served = try bob.python(RunLocationAttackTests.helpers + """
            s = socket.create_connection(("127.0.0.1", port))
            print(json.dumps(watch(s, 1, 10)))
            """, [String(setup.port), setup.marks.path])
        #expect((try? json(served.stdout))?["tpv"] as? Int == 1, "bob was not served after the flood: \(served.stdout)")
    }

    // MARK: attack 3: a run's process against the endpoint's judging of who holds a connection

    /// Attack 3: the run (a plain one, given location through the policy's `Program=` rule for
    /// python; its user at large has none) leaves a process behind that connects again and
    /// again across the run's end: a connection made after the end must get nothing, as its
    /// user at large would, and none may be served long after.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func aLeftoverRacingItsPlainRunsEndIsNotServedAfterIt() throws {
        let setup = try RunLocationAttackTests.Setup()
        let user = try TestUser("h6race")
        let leftover = RunLocationAttackTests.helpers + """
            def attempt():
                opened = time.time()
                try:
                    s = socket.create_connection(("127.0.0.1", port))
                except OSError:
                    return None
                s.settimeout(0.2)
                s.sendall(b'?WATCH={"enable":true,"json":true};\\n')
                buffer, last, tpv = b"", None, 0
                end = time.monotonic() + 0.4
                while time.monotonic() < end:
                    try:
                        chunk = s.recv(65536)
                    except socket.timeout:
                        continue
                    except OSError:
                        break
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\\n" in buffer:
                        line, buffer = buffer.split(b"\\n", 1)
                        if b'"TPV"' in line and b'"lat"' in line:
                            tpv, last = tpv + 1, time.time()
                s.close()
                return {"opened": opened, "tpv": tpv, "last": last}
            tries = []
            stop = time.monotonic() + 10
            while time.monotonic() < stop:
                t = attempt()
                if t:
                    tries.append(t)
            say(marks + "/tries", {"tries": tries})
            """
        let run = try RunTests.run(user, setup.requests, [
            "--location", "--", RunLocationAttackTests.python, "-c", RunLocationAttackTests.helpers + """
            if os.fork() == 0:
                os.setsid()
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(sys.executable, [sys.executable, "-c", sys.argv[3], str(port), marks])
            time.sleep(3)
            """, String(setup.port), setup.marks.path, leftover,
        ])
        #expect(run.status == 0, "\(run.stderr)")
        let ended = try setup.requests.ledger().runs(uid: user.uid, includeEnded: true).first?.ended
        let tries = setup.report("tries", within: 30)?["tries"] as? [[String: Any]] ?? []
        try #require(ended != nil && !tries.isEmpty, "the run did not end or the leftover did not report: \(tries.count)")
        let end = ended?.timeIntervalSince1970 ?? 0
        let servedWhileLive = tries.filter { ($0["opened"] as? Double ?? 0) < end && ($0["tpv"] as? Int ?? 0) > 0 }
        let afterEnd = tries.filter { ($0["opened"] as? Double ?? 0) > end + 0.2 }
        let servedAfter = afterEnd.filter { ($0["tpv"] as? Int ?? 0) > 0 }
        let late = tries.filter { ($0["last"] as? Double).map { $0 > end + 1 } ?? false }
        print("HostileReview6 race figures: \(tries.count) connections, \(servedWhileLive.count) served while the run "
              + "lived, \(afterEnd.count) opened after its end, \(servedAfter.count) of them served, \(late.count) "
              + "fixes more than 1 s after the end")
        #expect(!servedWhileLive.isEmpty, "the run was never served: the race proves nothing")
        #expect(!afterEnd.isEmpty)
        #expect(servedAfter.isEmpty, "connections made after the run's end were served: \(servedAfter)")
        #expect(late.isEmpty, "fixes went out more than 1 s after the run ended: \(late)")
    }

    /// Attack 3b: the endpoint serves a connection at the user's level when the holder scan
    /// does not find it held by one run's processes alone, and finds nobody holding a socket
    /// that is in flight in an SCM_RIGHTS message. A strict camera run (given no location)
    /// whose user at large has a location grant connects, sends its socket to itself over a
    /// socketpair and closes its copy while devaccessd looks, then takes it back and watches.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func aStrictRunsSocketHiddenInFlightDuringTheHolderScanIsNotServedAtItsUsersLevel() throws {
        let setup = try RunLocationAttackTests.Setup()
        let user = try TestUser("h6flight")
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name] + setup.requests.socket).status == 0)
        let script = RunLocationAttackTests.helpers + """
            plain = watch(socket.create_connection(("127.0.0.1", port)), 1, 5)
            s = socket.create_connection(("127.0.0.1", port))
            a, b = socket.socketpair()
            socket.send_fds(a, [b"s"], [s.fileno()])
            s.close()
            time.sleep(3)
            _, fds, _, _ = socket.recv_fds(b, 1, 1)
            hidden = watch(socket.socket(fileno=fds[0]), 1, 8)
            print(json.dumps({"plain": plain, "hidden": hidden}), flush=True)
            """
        let strict = try RunTests.run(user, setup.requests, ["--camera", "--strict", "--", RunLocationAttackTests.python,
                                                             "-c", script, String(setup.port), setup.marks.path])
        let output = String(decoding: strict.stdout, as: UTF8.self)
        #expect(strict.status == 0, "\(strict.stderr)")
        let result = try json(output)
        #expect((result["plain"] as? [String: Any])?["tpv"] as? Int == 0, "the strict run was served: \(output)")
        #expect((result["hidden"] as? [String: Any])?["tpv"] as? Int == 0,
                "a strict camera run was served its user's location by hiding its socket from the scan: \(output)")
    }
}
