import Foundation
import Glibc
import Testing
@testable import DevAccessBroker
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// One unprivileged user must not be able to guess passwords quickly through devaccessd,
/// nor to make it grow, nor to crowd out other users' prompts and waits.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users with passwords and PAM files"))
struct PasswordGuessingTests {
    /// argv: socket, connections, seconds, password. Every connection asks for the camera
    /// (auth_self) and answers each password prompt with the wrong password, again and
    /// again, until the time is up; prints what came back.
    static let guessers = """
        import socket, sys, json, threading, time
        path, n, seconds, password = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
        end = time.time() + seconds
        lock = threading.Lock()
        counts = {"prompts": 0, "answers": 0, "decisions": 0, "errors": {}, "connect_failures": 0, "messages": []}
        def note(key, value=1):
            with lock:
                counts[key] += value
        def guess():
            while time.time() < end:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.settimeout(max(0.1, end - time.time()))
                    s.connect(path)
                    f = s.makefile("rwb")
                    f.write(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"],
                                        "scope": "for", "duration": 60}).encode() + b"\\n"); f.flush()
                    while True:
                        s.settimeout(max(0.1, end - time.time()))
                        line = f.readline()
                        if not line:
                            break
                        r = json.loads(line)
                        if r.get("type") == "prompt":
                            note("prompts")
                            f.write(json.dumps({"version": 1, "id": 1, "type": "prompt-answer", "prompt": r["prompt"],
                                                "answer": "password", "password": password}).encode() + b"\\n")
                            f.flush()
                            note("answers")
                        elif r.get("type") == "error":
                            with lock:
                                counts["errors"][r.get("code")] = counts["errors"].get(r.get("code"), 0) + 1
                                if len(counts["messages"]) < 3 and r.get("reason") not in counts["messages"]:
                                    counts["messages"].append(r.get("reason"))
                            time.sleep(0.02)
                            break
                        elif r.get("type") == "decision":
                            note("decisions")
                            break
                except OSError:
                    note("connect_failures")
                finally:
                    s.close()
        threads = [threading.Thread(target=guess) for _ in range(n)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(json.dumps(counts))
        """

    /// argv: socket, password. One request for the camera answered with `password`; prints
    /// the final reply.
    static let oneTry = """
        import socket, sys, json
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(90)
        s.connect(sys.argv[1])
        f = s.makefile("rwb")
        f.write(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"],
                            "scope": "for", "duration": 60}).encode() + b"\\n"); f.flush()
        while True:
            r = json.loads(f.readline())
            if r.get("type") == "prompt":
                f.write(json.dumps({"version": 1, "id": 1, "type": "prompt-answer", "prompt": r["prompt"],
                                    "answer": "password", "password": sys.argv[2]}).encode() + b"\\n"); f.flush()
            else:
                print(json.dumps(r)); break
        """

    /// Memory and threads of a process, from /proc/PID/status.
    struct Footprint {
        var rssKB = 0
        var threads = 0

        static func of(_ pid: Int32) -> Footprint {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return Footprint() }
            var footprint = Footprint()
            for line in text.split(separator: "\n") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count >= 2, let value = Int(fields[1]) else { continue }
                if fields[0] == "VmRSS:" { footprint.rssKB = value }
                if fields[0] == "Threads:" { footprint.threads = value }
            }
            return footprint
        }
    }

    @Test func parallelGuessersGetAtMostOneCheckASecondAndTheDaemonStaysSmall() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let mallory = try TestUser("guess")
        try mallory.setPassword("correct horse 42")
        let before = Footprint.of(setup.daemon.pid)

        let seconds = 8.0
        let scratch = try TemporaryDirectory()
        let output = scratch.path + "/guessers.json"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let attack = Process()
        attack.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        attack.arguments = ["--reuid=\(mallory.uid)", "--regid=\(mallory.gid)", "--init-groups", "--", "/usr/bin/python3",
                            "-c", Self.guessers, setup.daemon.socketPath, "120", String(seconds), "guess 1234"]
        attack.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        let started = Date()
        try attack.run()
        var peak = Footprint()
        while attack.isRunning {
            let now = Footprint.of(setup.daemon.pid)
            peak.rssKB = max(peak.rssKB, now.rssKB)
            peak.threads = max(peak.threads, now.threads)
            usleep(100_000)
        }
        let elapsed = Date().timeIntervalSince(started)
        let counts = try json(String(contentsOfFile: output, encoding: .utf8))
        #expect((counts["answers"] as? Int ?? 0) > 0, "the guessers got password prompts: \(counts)")

        // Every PAM check is audited as a password prompt's outcome (and logged).
        let checks = try setup.requestEvents(mallory).filter {
            $0.details["kind"] == "password" && ["wrong-password", "accepted", "pam-failed"].contains($0.details["outcome"])
        }
        let logged = setup.daemon.log.components(separatedBy: "msg=\"password checked\"").count - 1
        let rate = Double(max(checks.count, logged)) / elapsed
        print("guessing: \(checks.count) checks audited, \(logged) logged in \(String(format: "%.1f", elapsed)) s "
              + "(\(String(format: "%.2f", rate))/s); daemon RSS \(before.rssKB) kB before, peak \(peak.rssKB) kB; "
              + "threads \(before.threads) before, peak \(peak.threads); guessers saw \(counts)")
        #expect(checks.count >= 1, "the guessers' passwords were checked at all")
        #expect(rate <= 1.0, "\(checks.count) PAM checks in \(elapsed) s")
        #expect(peak.rssKB < 64 * 1024, "devaccessd grew to \(peak.rssKB) kB")
        #expect(try setup.grants(mallory).isEmpty)

        // The right password still works once the back-off allows; until then the reply says how long to wait.
        var granted = false
        for _ in 0..<8 where !granted {
            let tried = try mallory.python(Self.oneTry, [setup.daemon.socketPath, "correct horse 42"])
            let reply = try json(tried.stdout)
            if reply["type"] as? String == "decision" {
                let results = reply["results"] as? [[String: Any]] ?? []
                granted = results.first?["outcome"] as? String == "granted"
                #expect(granted, "\(reply)")
                break
            }
            let reason = reply["reason"] as? String ?? ""
            #expect(reply["code"] as? String == "busy", "\(reply)")
            if reason.contains("open prompts") {
                // The guessers' prompts end as the broker notices they left.
                sleep(1)
                continue
            }
            let wait = reason.firstMatch(of: /try again in (\d+) s/).flatMap { Int($0.1) }
            #expect(wait != nil, "the refusal says how long to wait: \(reason)")
            sleep(UInt32(min(70, (wait ?? 5) + 1)))
        }
        #expect(granted)
        #expect(try mallory.canOpen(setup.camera, .readWrite))
    }

    /// argv: socket, connections, request JSON, seconds. Opens the connections one after
    /// another, sends the request on each, reads the first reply (a prompt, `queued`, or
    /// an error), prints what came back, then keeps the connections open.
    static let holdRequests = """
        import socket, sys, json, time
        path, n, request, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
        seen, keep, reasons = {}, [], []
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20)
            s.connect(path)
            s.sendall(request.encode() + b"\\n")
            buf = b""
            while not buf.endswith(b"\\n"):
                d = s.recv(65536)
                if not d: break
                buf += d
            r = json.loads(buf) if buf else {}
            key = r.get("code") or r.get("type") or "nothing"
            if r.get("type") == "queued" and not r.get("waiting"): key = "queued-not-waiting"
            seen[key] = seen.get(key, 0) + 1
            if r.get("type") == "error" and r.get("reason") not in reasons: reasons.append(r.get("reason"))
            keep.append(s)
        print(json.dumps({"seen": seen, "reasons": reasons[:3]}), flush=True)
        time.sleep(hold)
        """

    static func hold(_ user: TestUser, _ setup: RequestSetup, count: Int, request: String) throws -> BackgroundClient {
        try user.background(holdRequests, [setup.daemon.socketPath, String(count), request, "20"])
    }

    @Test func openPromptsAndWaitingClientsAreLimitedPerUserAndOthersAreServed() throws {
        let carol = try TestUser("lmtadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let mallory = try TestUser("lmtflood")
        let bob = try TestUser("lmtok")
        var holders: [BackgroundClient] = []
        defer { holders.forEach { $0.stop() } }
        let askCamera = #"{"version":1,"id":1,"type":"request","permissions":["camera"]}"#
        let waitMicrophone = #"{"version":1,"id":1,"type":"request","permissions":["microphone"],"wait":true}"#

        // Prompts: 4 open at once per user; the rest are told busy, with the reason.
        let prompting = try Self.hold(mallory, setup, count: 10, request: askCamera)
        holders.append(prompting)
        let prompts = prompting.report
        let promptsSeen = prompts["seen"] as? [String: Int] ?? [:]
        #expect(promptsSeen == ["prompt": 4, "busy": 6], "\(prompts)")
        #expect((prompts["reasons"] as? [String])?.first?.contains("open prompts") == true, "\(prompts)")
        // Each refusal is audited, as a refusal, not as a request (well within the budget).
        let promptRefusals = try setup.ledger().events().map(\.event)
            .filter { $0.type == .refused && $0.actor?.uid == mallory.uid }
        #expect(promptRefusals.count == 6, "\(promptRefusals.map(\.details))")
        // Clients waiting for an administrator: 16 per user.
        let waiting = try Self.hold(mallory, setup, count: 20, request: waitMicrophone)
        holders.append(waiting)
        let waits = waiting.report
        let waitsSeen = waits["seen"] as? [String: Int] ?? [:]
        #expect(waitsSeen == ["queued": 16, "busy": 4], "\(waits)")
        #expect((waits["reasons"] as? [String])?.first?.contains("waiting for an administrator") == true, "\(waits)")

        // Another user is served meanwhile; an administrator is not limited.
        let bobPrompt = try Self.hold(bob, setup, count: 2, request: askCamera)
        holders.append(bobPrompt)
        let bobs = bobPrompt.report
        #expect(bobs["seen"] as? [String: Int] == ["prompt": 2], "\(bobs)")
        let bobWait = try Self.hold(bob, setup, count: 2, request: waitMicrophone)
        holders.append(bobWait)
        let bobWaits = bobWait.report
        #expect(bobWaits["seen"] as? [String: Int] == ["queued": 2], "\(bobWaits)")
        let admin = try Self.hold(carol, setup, count: 6, request: askCamera)
        holders.append(admin)
        let admins = admin.report
        #expect(admins["seen"] as? [String: Int] == ["prompt": 6], "\(admins)")

        // The waiting clients' refusals share the user's audit budget with the requests that
        // changed nothing (the microphone already waiting in mallory's queued request), so
        // some of them are only counted: between the 6 above and all 10.
        let refused = try setup.ledger().events().map(\.event).filter { $0.type == .refused && $0.actor?.uid == mallory.uid }
        #expect((6...10).contains(refused.count), "\(refused.map(\.details))")
        #expect(refused.allSatisfy { $0.details["operation"] == "request" })
    }
}
