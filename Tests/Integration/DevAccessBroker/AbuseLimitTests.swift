import Foundation
import Glibc
import Testing
@testable import DevAccessBroker
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// With devaccessd the one writer, it must stay reachable for administrators whatever a
/// user does, and a user's refused requests must not fill the audit trail.
struct RefusalThrottleTests {
    @Test func aBurstIsRecordedThenCountedAndTheCountRidesOnTheNextRecord() {
        let throttle = UserBudget(burst: 3, window: .seconds(60))
        let start = ContinuousClock.now
        #expect((0..<3).map { _ in throttle.admit(1000, now: start) } == Array(repeating: .record(leftOut: 0), count: 3))
        // The first unit left out says when the window ends (its count may be taken then); the rest do not.
        #expect((0..<5).map { _ in throttle.admit(1000, now: start + .seconds(1)) }
                == [.skip(windowEnds: start + .seconds(60))] + Array(repeating: .skip(windowEnds: nil), count: 4))
        // Another user is not held back by the first one's flood.
        #expect(throttle.admit(1001, now: start + .seconds(1)) == .record(leftOut: 0))
        // The next window: recorded again, with the count of what was left out.
        #expect(throttle.admit(1000, now: start + .seconds(61)) == .record(leftOut: 5))
        #expect(throttle.admit(1000, now: start + .seconds(62)) == .record(leftOut: 0))
    }

    /// The count of a window is taken once: at the window's end (or at once when devaccessd
    /// stops), and then the next window's first record does not carry it again.
    @Test func theCountOfAnEndedWindowIsTakenOnce() {
        let throttle = UserBudget(burst: 1, window: .seconds(60))
        let start = ContinuousClock.now
        #expect(throttle.admit(1000, now: start) == .record(leftOut: 0))
        #expect(throttle.admit(1000, now: start + .seconds(1)) == .skip(windowEnds: start + .seconds(60)))
        #expect(throttle.admit(1000, now: start + .seconds(2)) == .skip(windowEnds: nil))
        #expect(throttle.takeLeftOut(1000, now: start + .seconds(59)) == 0, "the window has not ended")
        #expect(throttle.uidsWithLeftOut() == [1000])
        #expect(throttle.takeLeftOut(1000, now: start + .seconds(60)) == 2)
        #expect(throttle.takeLeftOut(1000, now: start + .seconds(60)) == 0, "taken once")
        #expect(throttle.admit(1000, now: start + .seconds(61)) == .record(leftOut: 0), "not carried again")
        #expect(throttle.admit(1000, now: start + .seconds(62)) == .skip(windowEnds: start + .seconds(121)))
        #expect(throttle.takeLeftOut(1000, now: start + .seconds(63), ended: true) == 1, "devaccessd stops")
        #expect(throttle.uidsWithLeftOut().isEmpty)
    }
}

@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct AbuseLimitTests {
    /// Sends argv[2] refused requests on one connection (a reset of a uid nobody has) and
    /// prints how many were answered permission-denied.
    static let refusalFlood = """
        import socket, sys, json
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        n = int(sys.argv[2])
        f = s.makefile("rwb")
        denied = 0
        for i in range(n):
            f.write(json.dumps({"version": 1, "id": i + 1, "type": "reset", "user": str(3000000000 + i)}).encode() + b"\\n")
            f.flush()
            r = json.loads(f.readline())
            if r.get("type") == "error" and r.get("code") == "permission-denied":
                denied += 1
        print(json.dumps({"denied": denied}))
        """

    @Test func oneUsersRefusalsDoNotFillTheAuditTrail() throws {
        let daemon = try RunningDaemon()
        let mallory = try TestUser("flood")
        let bob = try TestUser("floodok")
        let flood = try mallory.python(Self.refusalFlood, [daemon.socketPath, "200"])
        #expect(flood.status == 0, "\(flood.stderr)")
        #expect(try json(flood.stdout)["denied"] as? Int == 200, "every refused request is still answered")
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        let refusals = try ledger.events().map(\.event).filter { $0.type == .refused }
        #expect(refusals.filter { $0.actor?.uid == mallory.uid }.count == 20, "the burst, then counted only")
        // Another user's refusal is recorded although mallory's window is full.
        let bobs = try bob.devaccess(["reset", "--user", mallory.name, "--socket", daemon.socketPath])
        #expect(bobs.status == 77, "\(bobs.stderr)")
        let after = try ledger.events().map(\.event).filter { $0.type == .refused && $0.actor?.uid == bob.uid }
        #expect(after.count == 1)
    }

    /// Opens argv[2] connections, says hello on each, prints how many were served and how
    /// many were told busy, then keeps the served ones open for argv[3] seconds.
    static let holdConnections = """
        import socket, sys, json, time
        path, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
        served, busy, other, keep = 0, 0, [], []
        def line(s):
            buf = b""
            try:
                while not buf.endswith(b"\\n"):
                    d = s.recv(65536)
                    if not d: break
                    buf += d
            except (socket.timeout, ConnectionResetError):
                pass
            return json.loads(buf) if buf.endswith(b"\\n") else {}
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.settimeout(10)
            # A connection turned away gets its 'busy' frame at once, before any request.
            try:
                s.sendall(json.dumps({"version": 1, "id": 1, "type": "hello"}).encode() + b"\\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            r = line(s)
            if r.get("type") == "hello":
                served += 1
                keep.append(s)
            elif r.get("code") == "busy":
                busy += 1
                s.close()
            else:
                other.append(r)
                s.close()
        print(json.dumps({"served": served, "busy": busy, "other": other[:3]}), flush=True)
        time.sleep(hold)
        """

    /// Starts `holdConnections` as `user` in the background; returns the process and waits
    /// for its counts.
    static func hold(_ user: TestUser, _ socket: String, count: Int, seconds: Int) throws -> BackgroundClient {
        try user.background(holdConnections, [socket, String(count), String(seconds)], reportWithin: 20)
    }

    @Test func oneUserCannotTakeEverySlotAndAdminsKeepTheirs() throws {
        let carol = try TestUser("slotadm")
        let admins = try TestGroup("slotadm", members: [carol])
        let daemon = try RunningDaemon(arguments: ["--max-connections", "40", "--max-connections-per-user", "10",
                                                   "--reserved-connections", "10", "--admin-group", admins.name])
        let users = try (1...3).map { try TestUser("slot\($0)") }
        let late = try TestUser("slotlate")
        var holders: [BackgroundClient] = []
        defer { holders.forEach { $0.stop() } }

        // Each user gets at most 10, however many they ask for.
        for user in users {
            let holder = try Self.hold(user, daemon.socketPath, count: 15, seconds: 30)
            holders.append(holder)
            let counts = holder.report
            #expect(counts["served"] as? Int == 10, "\(user.name): \(counts)")
            #expect(counts["busy"] as? Int == 5, "\(user.name): \(counts)")
        }
        // 30 of 40 taken: the other 10 are the administrators'.
        let refused = try late.devaccess(["list", "--socket", daemon.socketPath])
        #expect(refused.status == 69, "\(refused.stderr)")
        #expect(refused.stderr.contains("busy"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("start it"), "a busy broker is not a stopped one: \(refused.stderr)")
        let root = try TestProcess.devaccess(["list", "--socket", daemon.socketPath])
        #expect(root.status == 0, "root is served from the reserved slots: \(root.stderr)")
        let admin = try carol.devaccess(["reconcile", "--socket", daemon.socketPath])
        #expect(admin.status == 0, "an admin is served from the reserved slots: \(admin.stderr)")
        #expect(daemon.log.contains("turning clients away"))
    }

    /// At the per-user limit, a user's new connection closes that user's connection idle
    /// longest instead of being turned away; connections that just spoke are kept.
    @Test func aUsersIdlestConnectionMakesRoomForTheirNewOne() throws {
        let daemon = try RunningDaemon(arguments: ["--max-connections-per-user", "5"])
        let user = try TestUser("evict")
        let holder = try Self.hold(user, daemon.socketPath, count: 5, seconds: 30)
        defer { holder.stop() }
        let counts = holder.report
        #expect(counts["served"] as? Int == 5, "\(counts)")
        sleep(6)
        let served = try user.devaccess(["list", "--socket", daemon.socketPath])
        #expect(served.status == 0, "the idlest of the 5 made room: \(served.stderr)")
        #expect(daemon.log.contains("closing a user's idlest connection for a new one"), "\(daemon.log)")
    }

    /// Sends one byte of a message every 0.5 s, never the newline; prints what the broker
    /// answered and after how many seconds it ended the connection.
    static let dribble = """
        import socket, sys, json, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.settimeout(0.5)
        start, got = time.monotonic(), b""
        message = json.dumps({"version": 1, "id": 1, "type": "hello", "pad": "x" * 200}).encode()
        for byte in message:
            try:
                s.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                d = s.recv(65536)
                if not d: break
                got += d
            except socket.timeout:
                pass
            if time.monotonic() - start > 30: break
        print(json.dumps({"seconds": time.monotonic() - start, "reply": got.decode(errors="replace")}))
        """

    /// A message times out from its first byte: a client that keeps a connection busy by
    /// sending a byte now and then (never idle, never done) is cut off.
    @Test func aMessageSentOneByteAtATimeTimesOutFromItsFirstByte() throws {
        let daemon = try RunningDaemon(arguments: ["--message-timeout", "2", "--idle-timeout", "60"])
        let user = try TestUser("dribble")
        let result = try user.python(Self.dribble, [daemon.socketPath])
        #expect(result.status == 0, "\(result.stderr)")
        let outcome = try json(result.stdout)
        let seconds = try #require(outcome["seconds"] as? Double)
        #expect(seconds < 6, "the dribbling connection lived \(seconds) s")
        #expect((outcome["reply"] as? String)?.contains("\"timeout\"") == true, "\(outcome)")
        #expect((outcome["reply"] as? String)?.contains("first byte") == true, "\(outcome)")
        #expect(daemon.stop() == 0)
    }

    /// Opens argv[2] connections, each sending the first byte of a message (slow clients
    /// that never finish), and prints how many the broker took and how many it turned away;
    /// then holds them for argv[3] seconds, a byte on each now and then.
    static let slowConnections = """
        import socket, sys, json, time, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        path, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
        open_, busy = [], 0
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.setblocking(False)
            try:
                s.send(b"{")
            except OSError:
                busy += 1
                s.close()
                continue
            open_.append(s)
        # Every refusal arrives as "busy" then end of stream; a connection the broker took
        # hears nothing. Wait until no refusal has come for 2 s (a loaded machine accepts
        # late), at most 20 s; poll, since select cannot take descriptors past 1023.
        import select
        watch = select.poll()
        by_fd = {}
        for s in open_:
            watch.register(s, select.POLLIN)
            by_fd[s.fileno()] = s
        undecided, last_refusal = set(by_fd), time.monotonic()
        give_up = time.monotonic() + 20
        while undecided and time.monotonic() < give_up and time.monotonic() - last_refusal < 2:
            for fd, _ in watch.poll(200):
                if fd not in undecided:
                    continue
                try:
                    d = by_fd[fd].recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b""
                if d == b"" or b"busy" in d:
                    busy += 1
                    undecided.discard(fd)
                    watch.unregister(fd)
                    by_fd[fd].close()
                    last_refusal = time.monotonic()
                else:
                    watch.unregister(fd)  # taken, and told something else (a timeout): not busy
        taken = [by_fd[fd] for fd in undecided]
        print(json.dumps({"taken": len(taken), "busy": busy}), flush=True)
        end = time.monotonic() + hold
        while time.monotonic() < end:
            for s in taken:
                try: s.send(b" ")
                except OSError: pass
            time.sleep(1)
        """

    /// Opens argv[2] connections of one user at once and says hello on each, three times;
    /// prints how many were answered every time.
    static let activeClients = """
        import socket, sys, json, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        path, n = sys.argv[1], int(sys.argv[2])
        conns = []
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            conns.append((s, s.makefile("rwb")))
        served = 0
        for s, f in conns:
            ok = True
            for k in range(3):
                f.write(json.dumps({"version": 1, "id": k + 1, "type": "hello"}).encode() + b"\\n")
                f.flush()
                r = json.loads(f.readline() or b"{}")
                ok = ok and r.get("type") == "hello"
            served += ok
        print(json.dumps({"served": served}))
        """

    /// Issue 10, finding 3, at its own scale and the default limits: 1,100 slow connections
    /// of one user take at most their 256 slots; another user and root are still served,
    /// and 200 busy clients of one user are all served.
    @Test func elevenHundredSlowConnectionsLeaveOthersServedAndTwoHundredActiveAreServed() throws {
        // The slots are the point here; the message timeout (which would cut these off
        // after 10 s) has its own test.
        let daemon = try RunningDaemon(arguments: ["--message-timeout", "120"])
        let mallory = try TestUser("slow")
        let bob = try TestUser("slowok")
        let holder = try mallory.background(Self.slowConnections, [daemon.socketPath, "1100", "20"])
        defer { holder.stop() }
        let counts = holder.report
        #expect(counts["taken"] as? Int == 256, "one user holds at most 256 slots: \(counts)")
        #expect(counts["busy"] as? Int == 1100 - 256, "\(counts)")

        let hello = try bob.python(LockedLedgerTests.helloTimer, [daemon.socketPath, "5"])
        #expect(hello.status == 0, "another user is served beside 1,100 slow connections: \(hello.stderr)")
        let root = try TestProcess.run("/usr/bin/python3", ["-c", LockedLedgerTests.helloTimer, daemon.socketPath, "5"])
        #expect(root.status == 0, "root is served: \(root.stderr)")

        let active = try bob.python(Self.activeClients, [daemon.socketPath, "200"])
        #expect(active.status == 0, "\(active.stderr)")
        #expect(try json(active.stdout)["served"] as? Int == 200, "\(active.stdout)")
        #expect(daemon.stop() == 0)
    }

    /// Opens argv[2] connections with a small receive buffer and writes whole status
    /// requests on each as fast as the broker takes them, never reading a reply.
    static let unreadReplies = """
        import socket, sys, time, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        path, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
        line = b'{"version":1,"id":1,"type":"status"}\\n' * 64
        conns = []
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(path)
            s.setblocking(False)
            conns.append(s)
        print('{"connected": %d}' % len(conns), flush=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for s in conns:
                try: s.send(line)
                except (BlockingIOError, OSError): pass
            time.sleep(0.01)
        """

    static func residentKB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
        }
        return 0
    }

    /// A client that sends requests and never reads the replies costs the broker a bounded
    /// outbox, not memory that grows for as long as it keeps sending (review finding: 1 GB
    /// in 140 s from 256 such connections).
    @Test func repliesNobodyReadsDoNotGrowTheBroker() throws {
        let daemon = try RunningDaemon()
        let mallory = try TestUser("unread")
        let flood = try mallory.background(Self.unreadReplies, [daemon.socketPath, "256", "180"])
        defer { flood.stop() }
        #expect(flood.report["connected"] as? Int == 256)
        // Measured: about 240 KB per connection (its outbox, its buffered requests), reached
        // within about 12 s on an idle machine and much later when the whole suite loads it;
        // before the bound it grew about 8 MB/s for as long as it went on. So the judgement is
        // not at a fixed time: the broker must level off (under 4 MB in some 8 s while the
        // flood goes on, for at most 180 s), and never pass 160 MB on the way.
        var samples: [(time: Date, kb: Int)] = []
        var levelled: (from: Int, to: Int)?
        let end = Date().addingTimeInterval(170)
        while levelled == nil && Date() < end {
            sleep(2)
            let now = (Date(), Self.residentKB(daemon.pid))
            samples.append(now)
            #expect(now.1 > 0, "devaccessd is gone")
            if let window = samples.last(where: { now.0.timeIntervalSince($0.time) >= 8 }), now.1 - window.kb < 4_000 {
                levelled = (window.kb, now.1)
            }
        }
        let peak = samples.map(\.kb).max() ?? 0
        #expect(levelled != nil, "the broker kept growing under unread replies: \(samples.map(\.kb)) KB every 2 s")
        #expect(peak < 160_000, "\(peak) KB")
        let bob = try TestUser("unreadok")
        let hello = try bob.python(LockedLedgerTests.helloTimer, [daemon.socketPath, "3"])
        #expect(hello.status == 0, "\(hello.stderr)")
    }

    /// A loop that changes something each time (a policy-allowed grant, then the user's own
    /// revoke) writes the audit trail every round: one user gets 60 such changes a minute,
    /// then `busy`, while another user is still served (review finding: 230 rows/s before).
    @Test func oneUsersGrantAndRevokeLoopIsLimitedPerMinute() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let mallory = try TestUser("churn")
        let bob = try TestUser("churnok")
        var served = 0
        var busy = 0
        for _ in 0..<40 {
            let granted = try mallory.withoutTerminal(["request", "camera", "--always"] + setup.socket)
            let revoked = try mallory.devaccess(["revoke", "camera", "--user", mallory.name] + setup.socket)
            for run in [granted, revoked] {
                if run.status == 0 { served += 1 } else if run.stderr.contains("the most one user may") { busy += 1 }
            }
        }
        #expect(served == 60, "60 changes a minute are served: \(served) served, \(busy) busy")
        #expect(busy == 20, "the rest are told busy: \(busy)")
        let rows = try setup.ledger().events().map(\.event).filter { $0.actor?.uid == mallory.uid }.count
        #expect(rows < 250, "\(rows) audit rows of mallory's in 80 attempts")
        let other = try bob.withoutTerminal(["request", "camera", "--always"] + setup.socket)
        #expect(other.status == 0, "another user is served: \(other.stderr)")
    }

    /// Maps libc executable argv[2] times (each a mapping of its own), then connects and
    /// says hello in a loop: each connection makes the broker read the program's maps.
    static let manyMappings = """
        import ctypes, ctypes.util, json, mmap, os, socket, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        fd = os.open("/usr/lib/x86_64-linux-gnu/libc.so.6", os.O_RDONLY)
        made = 0
        for i in range(int(sys.argv[2])):
            p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, 0)
            if p is None or p == ctypes.c_void_p(-1).value: break
            made += 1
        print(json.dumps({"mappings": made}), flush=True)
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sys.argv[1])
                s.sendall(b'{"version":1,"id":1,"type":"hello"}\\n')
                s.recv(65536)
            except OSError:
                pass
            s.close()
        """

    /// A program's maps are read when it connects; a user whose processes have tens of
    /// thousands of executable mappings must not stall the connection thread for everyone
    /// (review finding: root's revoke took 1.8-48 s behind 3-48 such processes).
    @Test func processesWithHugeMapsDoNotStallOthers() throws {
        let daemon = try RunningDaemon()
        let mallory = try TestUser("maps")
        let attackers = try (0..<3).map { _ in try mallory.background(Self.manyMappings, [daemon.socketPath, "35000"]) }
        defer { attackers.forEach { $0.stop() } }
        #expect(attackers.allSatisfy { ($0.report["mappings"] as? Int ?? 0) >= 30000 }, "\(attackers.map(\.report))")
        sleep(1)
        let root = try TestProcess.run("/usr/bin/python3", ["-c", LockedLedgerTests.helloTimer, daemon.socketPath, "20"])
        #expect(root.status == 0, "\(root.stderr)")
        let worst = try #require(try json(root.stdout)["worst_ms"] as? Double)
        // The stall this guards against was 1.8-48 s; the bound stays above a loaded machine's.
        #expect(worst < 1000, "root's hello took \(worst) ms beside processes with huge maps")
    }

    @Test func reservedSlotsMustLeaveRoomForUsers() throws {
        let daemon = try RunningDaemon(arguments: ["--max-connections", "10", "--reserved-connections", "10"],
                                       waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 64, "\(daemon.log)")
        #expect(daemon.log.contains("--reserved-connections (10) must be less than --max-connections (10)"))
    }
}
