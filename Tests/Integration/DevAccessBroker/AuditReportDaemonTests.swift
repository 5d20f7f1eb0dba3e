import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// Audit reports through the one interface: devaccessd serves them to members of the admin
/// group, refuses (and audits) everyone else, pages a report larger than one reply, and
/// `--follow` delivers an event written by a grant.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups, nodes and ACLs"))
struct AuditReportDaemonTests {
    @Test func aPlainUserIsRefusedAndAnAdminMemberIsServed() throws {
        let carol = try TestUser("repadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", admins: [carol])
        let erin = try TestUser("repuser")
        let mallory = try TestUser("repnosy")
        let socket = ["--socket", setup.daemon.socketPath]
        #expect(try erin.withoutTerminal(["request", "camera", "--always"] + socket).status == 0)

        // mallory reads nothing, whatever the report, and the refusal is audited.
        let before = try setup.ledger().events().filter { $0.event.type == .refused }.count
        for report in [["audit"], ["audit", "--summary"], ["audit", "--event", "1"], ["audit", "--format", "csv"],
                       ["audit", "--user", mallory.name]] {
            let run = try mallory.devaccess(report + socket)
            #expect(run.status == 77, "\(report): \(run.stderr)")
            #expect(run.stderr.contains("may not read the audit trail"), "\(run.stderr)")
            #expect(run.stdout.isEmpty, "\(run.stdout)")
        }
        let refusals = try setup.ledger().events().map(\.event).filter { $0.type == .refused }
        #expect(refusals.count == before + 5)
        #expect(refusals.last?.actor?.uid == mallory.uid && refusals.last?.details["operation"] == "audit")

        // carol, a member of the admin group (not root), is served through devaccessd.
        let events = try carol.devaccess(["audit", "--format", "json", "--user", erin.name] + socket)
        #expect(events.status == 0, "\(events.stderr)")
        let document = try json(events.stdout)
        #expect((document["chain"] as? [String: Any])?["intact"] as? Bool == true, "\(events.stdout)")
        let list = document["events"] as? [[String: Any]] ?? []
        let decision = list.first { $0["type"] as? String == "decision" }
        #expect(decision?["decision"] as? String == "allow" && decision?["how"] as? String == "policy", "\(list)")
        #expect(list.allSatisfy { $0["uid"] as? Int == Int(erin.uid) || $0["actorUid"] as? Int == Int(erin.uid) })

        let summary = try carol.devaccess(["audit", "--summary", "--format", "json", "--permission", "camera"] + socket)
        #expect(summary.status == 0, "\(summary.stderr)")
        let total = (try json(summary.stdout)["summary"] as? [String: Any])?["total"] as? [String: Any]
        #expect(total?["grantsPolicy"] as? Int == 1 && total?["requests"] as? Int == 1, "\(summary.stdout)")
        // mallory's refusals name no permission: the camera summary does not count them.
        #expect(total?["refusals"] as? Int == 0, "\(summary.stdout)")

        // The next report walks from devaccessd's checkpoint (the head the last one verified),
        // and still finds an edit of an event written after it.
        let again = try carol.devaccess(["audit", "--format", "json", "--summary"] + socket)
        let checkpoint = try #require((try json(again.stdout)["chain"] as? [String: Any])?["checkedFrom"] as? Int)
        #expect(again.status == 0, "\(again.stdout)")
        #expect(try carol.devaccess(["grant", "camera", "--user", erin.name] + socket).status == 0)
        let grantSeq = try #require(try setup.ledger().events().last { $0.event.type == .grant }?.seq)
        #expect(Int(grantSeq) > checkpoint)
        let edit = try TestProcess.run("/usr/bin/sqlite3", [setup.stateDirectory + "/" + Ledger.fileName,
            "UPDATE audit_events SET details = replace(details, 'allow', 'deny') WHERE seq = \(grantSeq)"])
        #expect(edit.status == 0, "\(edit.stderr)")
        let tampered = try carol.devaccess(["audit", "--user", erin.name] + socket)
        #expect(tampered.status == 65, "\(tampered.stderr)")
        #expect(tampered.stdout.hasPrefix("WARNING: the audit chain is broken at event \(grantSeq) (edited)"),
                "\(tampered.stdout)")
        // audit --verify walks the whole chain, checkpoint or not.
        #expect(try carol.devaccess(["audit", "--verify"] + socket).status == 65)

        // root --offline is refused while the daemon runs: it is the one reader and writer.
        let offline = try TestProcess.devaccess(["audit", "--offline", "--state-dir", setup.stateDirectory] + socket)
        #expect(offline.status == 75, "\(offline.stderr)")
    }

    @Test func aReportLargerThanOneReplyIsPaged() throws {
        let carol = try TestUser("reppage")
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", admins: [carol])
        let socket = ["--socket", setup.daemon.socketPath]
        // 2,500 events of ~3 KiB: about 8 MiB, eight times the reply limit.
        let writer = try Ledger(path: setup.stateDirectory + "/" + Ledger.fileName, journal: .disabled)
        let note = String(repeating: "n", count: 3000)
        let generated = (0..<2500).map { n in
            AuditEvent(type: .hotplug, actor: Principal(uid: 0, name: "root"), permission: .camera,
                       deviceID: "camera:generated", details: ["n": String(n), "text": note])
        }
        try writer.append(contentsOf: generated)
        let run = try carol.devaccess(["audit", "--format", "json", "--device", "camera:generated"] + socket)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.utf8.count > 6 * BrokerProtocol.maxReplySize, "\(run.stdout.utf8.count) bytes")
        let events = try json(run.stdout)["events"] as? [[String: Any]] ?? []
        #expect(events.count == 2500)
        #expect(events.compactMap { ($0["details"] as? [String: String])?["n"] } == (0..<2500).map(String.init))
        let csv = try carol.devaccess(["audit", "--format", "csv", "--device", "camera:generated"] + socket)
        #expect(csv.status == 0 && csv.stdout.split(separator: "\r\n").count == 2501, "\(csv.stderr)")
    }

    @Test func followDeliversAnEventWrittenByAGrant() throws {
        let carol = try TestUser("repfol")
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", admins: [carol])
        let erin = try TestUser("repfolu")
        let socket = ["--socket", setup.daemon.socketPath]
        let follower = Process()
        follower.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        follower.arguments = ["--reuid=\(carol.uid)", "--regid=\(carol.gid)", "--init-groups", "--",
                              TestProcess.devaccessBinary, "audit", "--follow", "--format", "json"] + socket
        let output = Pipe()
        follower.standardOutput = output
        follower.standardError = FileHandle.nullDevice
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in lines.add(handle.availableData) }
        try follower.run()
        defer {
            if follower.isRunning { follower.terminate() }
            follower.waitUntilExit()
            output.fileHandleForReading.readabilityHandler = nil
        }
        // The header (the chain's state) says the follower is reading.
        #expect(lines.wait(for: 10) { $0.contains("\"chain\"") }, "\(lines.text)")
        let granted = try carol.devaccess(["grant", "camera", "--user", erin.name] + socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        // A correctness bound, not a benchmark: devaccessd answers the held request when it writes.
        #expect(lines.wait(for: 5) { $0.contains("\"type\":\"grant\"") && $0.contains("\"user\":\"\(erin.name)\"") },
                "\(lines.text)")
        let eventLines = lines.text.split(separator: "\n").dropFirst()
        for line in eventLines {
            let object = try json(String(line))
            #expect(object["seq"] is Int && object["hash"] is String, "\(line)")
        }
        // Only what was written after it started: no event of before the grant.
        #expect(eventLines.first.map { $0.contains("\"type\":\"grant\"") } == true, "\(lines.text)")
    }
}

extension AuditReportDaemonTests {
    /// `--follow` is pushed: a follow request (after the head, with a wait) gets no reply
    /// while nothing is written, and gets it, with the event, as soon as a grant writes one.
    @Test func aFollowRequestIsAnsweredWhenAnEventIsWrittenAndNotBefore() throws {
        let carol = try TestUser("repwait")
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", admins: [carol])
        let erin = try TestUser("repwaitu")
        let socket = ["--socket", setup.daemon.socketPath]
        let head = try setup.ledger().newestEventSeq()
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        client.arguments = ["--reuid=\(carol.uid)", "--regid=\(carol.gid)", "--init-groups", "--", "/usr/bin/python3", "-c", """
            import json, select, socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            request = {"version": 1, "id": 1, "type": "audit-report", "mode": "events", "after": int(sys.argv[2]),
                       "wait": 30, "verify": False}
            s.sendall((json.dumps(request) + "\\n").encode())
            ready, _, _ = select.select([s], [], [], 3)
            print("quiet" if not ready else "answered at once", flush=True)
            s.settimeout(25)
            reply = b""
            while not reply.endswith(b"\\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                reply += chunk
            print(reply.decode(), flush=True)
            """, setup.daemon.socketPath, String(head)]
        let output = Pipe()
        client.standardOutput = output
        client.standardError = FileHandle.nullDevice
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in lines.add(handle.availableData) }
        try client.run()
        defer {
            if client.isRunning { client.terminate() }
            client.waitUntilExit()
            output.fileHandleForReading.readabilityHandler = nil
        }
        // Nothing written: 3 s without a reply (a poll would have been answered at once, empty).
        #expect(lines.wait(for: 10) { $0.contains("quiet") || $0.contains("answered at once") }, "\(lines.text)")
        #expect(lines.text.hasPrefix("quiet"), "\(lines.text)")
        let granted = try carol.devaccess(["grant", "camera", "--user", erin.name] + socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        // A correctness bound, not a benchmark: the reply follows the write.
        #expect(lines.wait(for: 5) { $0.contains("\"type\":\"grant\"") }, "\(lines.text)")
        let reply = try json(String(lines.text.split(separator: "\n").dropFirst().first ?? ""))
        let events = (reply["document"] as? [String: Any])?["events"] as? [[String: Any]] ?? []
        #expect(!events.isEmpty && events.allSatisfy { ($0["seq"] as? Int ?? 0) > Int(head) }, "\(reply)")
        #expect(events.contains { $0["type"] as? String == "grant" && $0["user"] as? String == erin.name }, "\(reply)")
    }
}

extension AuditReportDaemonTests {
    /// The checkpoint a report's walk reached is kept in the ledger: a restarted devaccessd
    /// walks from it (not the whole chain again), and an edit of an event written after it
    /// is still said at the top of the next report.
    @Test func aRestartedDaemonWalksFromTheCheckpointKeptInTheLedger() throws {
        let carol = try TestUser("repckpt")
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", admins: [carol])
        let erin = try TestUser("repckptu")
        #expect(try carol.devaccess(["grant", "camera", "--user", erin.name] + setup.socket).status == 0)
        let first = try carol.devaccess(["audit", "--summary", "--format", "json"] + setup.socket)
        #expect(first.status == 0, "\(first.stderr)")
        let head = try setup.ledger().newestEventSeq()
        #expect(try setup.ledger().storedCheckpoint()?.seq == head)

        try setup.restart()
        let again = try carol.devaccess(["audit", "--summary", "--format", "json"] + setup.socket)
        #expect(again.status == 0, "\(again.stderr)")
        let checkedFrom = (try json(again.stdout)["chain"] as? [String: Any])?["checkedFrom"] as? Int
        #expect(checkedFrom == Int(head), "a new devaccessd walks from the stored checkpoint: \(again.stdout)")

        #expect(try carol.devaccess(["revoke", "camera", "--user", erin.name] + setup.socket).status == 0)
        let revokeSeq = try #require(try setup.ledger().events().last { $0.event.type == .revoke }?.seq)
        #expect(revokeSeq > head)
        let edit = try TestProcess.run("/usr/bin/sqlite3", [setup.stateDirectory + "/" + Ledger.fileName,
            "UPDATE audit_events SET subject_name = 'someone else' WHERE seq = \(revokeSeq)"])
        #expect(edit.status == 0, "\(edit.stderr)")
        try setup.restart()
        let tampered = try carol.devaccess(["audit", "--user", erin.name] + setup.socket)
        #expect(tampered.status == 65, "\(tampered.stderr)")
        #expect(tampered.stdout.hasPrefix("WARNING: the audit chain is broken at event \(revokeSeq) (edited)"),
                "\(tampered.stdout)")
        // The broken walk did not move the checkpoint.
        #expect(try setup.ledger().storedCheckpoint()?.seq == head)
    }
}

/// Collects a child's output as it arrives.
final class LineCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()

    func add(_ chunk: Data) {
        lock.lock()
        data.append(chunk)
        lock.unlock()
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }

    /// Whether `condition` held within `seconds`.
    func wait(for seconds: Double, _ condition: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(text) { return true }
            usleep(50_000)
        }
        return condition(text)
    }
}
