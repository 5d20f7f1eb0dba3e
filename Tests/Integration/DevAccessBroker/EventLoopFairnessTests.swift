import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// The event loop answers a user's own status inline, and each inline answer frees the
/// connection's next pipelined request. Hostile review M2: a user who pipelines thousands
/// of statuses must not keep the loop from everyone else; the loop serves a few rounds of
/// the replies it posted itself, then polls (and so accepts and reads the others) again.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct EventLoopFairnessTests {
    /// Ordered by events, not by time: devaccessd is stopped (SIGSTOP) while the flood is
    /// written on every connection of the flooder and the victim connects and asks, so all
    /// of it is waiting when the loop runs again; it is stopped again the moment the victim
    /// is answered, and the flood's replies sent by then are counted. A loop that drains
    /// its own replies until none are left answers the whole flood first (with the rounds
    /// unbounded: 4800 of 4800 before the victim; with 4: 720, the first read of each
    /// connection and its rounds, then the victim).
    @Test func aPipelinedStatusFloodDoesNotHoldTheLoopFromAnotherUser() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let mallory = try TestUser("fairmal")
        let victim = try TestUser("fairvic")
        let daemon = setup.daemon
        defer { kill(daemon.pid, SIGCONT) }
        let run = try TestProcess.run("/usr/bin/python3", [
            "-c", Self.script, daemon.socketPath, String(daemon.pid),
            String(mallory.uid), String(mallory.gid), String(victim.uid), String(victim.gid),
            "120",  // the flooder's connections (the per-user limit is 256)
        ])
        try #require(run.status == 0, "the flood script failed: \(run.stdout) \(run.stderr) \(daemon.log.suffix(3000))")
        let report = try json(run.stdout)
        let total = report["total"] as? Int ?? 0
        let before = report["answered_before_victim"] as? Int ?? -1
        let statuses = report["flood_statuses"] as? Int ?? 0
        // The flood ran, and every request of it was answered as a status (not refused).
        #expect(total >= 960, "\(report)")
        #expect(statuses == total, "\(report)")
        #expect(report["victim_answered"] as? Bool == true, "\(report)")
        // The victim was answered while the flood still had requests unanswered.
        #expect(before >= 0 && before < total, "the victim waited for the whole flood: \(report)")
    }

    /// argv: socket, devaccessd's pid, the flooder's uid and gid, the victim's uid and gid,
    /// the flooder's connection count. Runs as root; connects as each user in a child of its
    /// own (the broker takes the identity from SO_PEERCRED at connect) and takes the
    /// connections over (SCM_RIGHTS); the children stay until the end, so their pids live.
    static let script = #"""
        import json, os, select, signal, socket, sys, time
        path, daemon = sys.argv[1], int(sys.argv[2])
        m_uid, m_gid, v_uid, v_gid, conns = map(int, sys.argv[3:8])

        def status(i):
            return json.dumps({"version": 1, "id": i, "type": "status", "permissions": ["camera"]}).encode() + b"\n"

        def line(s):
            buf = b""
            while not buf.endswith(b"\n"):
                d = s.recv(65536)
                if not d:
                    raise SystemExit("a connection ended: %r" % buf[:300])
                buf += d
            return buf

        def child(uid, gid, body):
            parent, mine = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                try:
                    parent.close()
                    os.setgroups([])
                    os.setresgid(gid, gid, gid)
                    os.setresuid(uid, uid, uid)
                    body(mine)
                    mine.recv(1)  # until the parent ends
                except BaseException as e:
                    print("child %d: %r" % (uid, e), file=sys.stderr, flush=True)
                finally:
                    os._exit(0)
            mine.close()
            return parent

        def flooder(ctl):
            held, size = [], 0
            for _ in range(conns):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                s.sendall(status(1))
                size = max(size, len(line(s)))
                held.append(s)
            socket.send_fds(ctl, [json.dumps({"size": size}).encode()], [s.fileno() for s in held])

        def victim(ctl):
            warm = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            warm.connect(path)
            for i in range(3):  # its identity and inputs kept, as for any user who asked before
                warm.sendall(status(1 + i))
                line(warm)
            ctl.sendall(b"r")
            ctl.recv(1)  # go: connect and ask while devaccessd is stopped
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(status(7))
            socket.send_fds(ctl, [b"v"], [s.fileno()])

        def stopped(state):
            # Waits until devaccessd is stopped (T) or running again (not T).
            while True:
                with open("/proc/%d/stat" % daemon) as f:
                    now = f.read().rsplit(")", 1)[1].split()[0]
                if (now in "tT") == state:
                    return
                time.sleep(0.001)

        m_ctl = child(m_uid, m_gid, flooder)
        meta, fds, _, _ = socket.recv_fds(m_ctl, 4096, conns)
        flood = [socket.socket(fileno=fd) for fd in fds]
        size = json.loads(meta)["size"]
        v_ctl = child(v_uid, v_gid, victim)
        if v_ctl.recv(1) != b"r":
            raise SystemExit("the victim's client did not start")
        # Every connection's replies must fit what the socket and devaccessd's outbox hold
        # unread, or the loop stops on a full outbox anyway and the test proves nothing.
        per = max(8, min(64, 120000 // (size + 2048)))
        total = per * len(flood)
        try:
            os.kill(daemon, signal.SIGSTOP)
            stopped(True)
            for s in flood:
                s.sendall(b"".join(status(1000 + i) for i in range(per)))
            v_ctl.sendall(b"g")
            _, vfds, _, _ = socket.recv_fds(v_ctl, 16, 1)
            mine = socket.socket(fileno=vfds[0])
            mine.settimeout(300)
            os.kill(daemon, signal.SIGCONT)
            reply = line(mine)
            os.kill(daemon, signal.SIGSTOP)
            stopped(True)
            counts = []
            for s in flood:
                s.setblocking(False)
                got = b""
                while True:
                    try:
                        d = s.recv(1 << 20)
                    except BlockingIOError:
                        break
                    if not d:
                        break
                    got += d
                counts.append(got)
            before = sum(c.count(b"\n") for c in counts)
        finally:
            os.kill(daemon, signal.SIGCONT)
        # The rest of the flood, answered after (each connection's replies in full).
        statuses = 0
        for s, got in zip(flood, counts):
            s.setblocking(True)
            s.settimeout(300)
            while got.count(b"\n") < per:
                d = s.recv(1 << 20)
                if not d:
                    break
                got += d
            statuses += sum(1 for l in got.split(b"\n") if b'"permissions"' in l)
        print(json.dumps({"total": total, "answered_before_victim": before, "flood_statuses": statuses,
                          "per_connection": per, "reply_size": size,
                          "victim_answered": b'"permissions"' in reply}))
        m_ctl.close()
        v_ctl.close()
        os.wait()
        os.wait()
        """#
}
