import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// One user cannot fill the audit trail (and the disk) with requests that change
/// nothing: they are all answered, but only a burst per window is written, and the next
/// written one says how many were left out.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct AuditVolumeTests {
    /// For argv[2] seconds, sends requests for argv[3] (permissions, comma-separated) with
    /// a 1000-byte reason on one connection as fast as the broker answers; prints how many
    /// were answered with a decision reply.
    static let requestFlood = """
        import socket, sys, json, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        f = s.makefile("rwb")
        end = time.time() + float(sys.argv[2])
        permissions = sys.argv[3].split(",")
        sent = answered = 0
        other = []
        while time.time() < end:
            sent += 1
            f.write(json.dumps({"version": 1, "id": sent, "type": "request", "permissions": permissions,
                                "reason": "x" * 1000}).encode() + b"\\n")
            f.flush()
            r = json.loads(f.readline())
            if r.get("type") == "decision":
                answered += 1
            elif len(other) < 3:
                other.append(r)
        print(json.dumps({"sent": sent, "answered": answered, "other": other}))
        """

    @Test func aRequestFloodAddsABoundedNumberOfAuditRows() throws {
        let config = try TemporaryDirectory()
        try Data("[camera]\nDefault=deny\n[microphone]\nDefault=deny\n".utf8)
            .write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        let window = 10
        let daemon = try RunningDaemon(arguments: ["--config-dir", config.path],
                                       environment: ["DEVACCESS_TEST_AUDIT_WINDOW": String(window)])
        let mallory = try TestUser("vflood")
        let bob = try TestUser("vcalm")
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        func rows(of user: TestUser) throws -> [AuditEvent] {
            try ledger.events().map(\.event).filter { $0.actor?.uid == user.uid || $0.subject?.uid == user.uid }
        }
        let rowsBefore = try ledger.events().count

        let started = Date()
        let flood = try mallory.python(Self.requestFlood, [daemon.socketPath, "5", "camera,microphone"])
        #expect(flood.status == 0, "\(flood.stderr)")
        let counts = try json(flood.stdout)
        let answered = counts["answered"] as? Int ?? 0
        #expect(answered == counts["sent"] as? Int, "every request is answered: \(flood.stdout)")
        #expect(answered >= 50, "not a flood: \(flood.stdout)")
        let written = try rows(of: mallory)
        #expect(written.count < 100, "\(written.count) audit rows for \(answered) requests")
        #expect(written.allSatisfy { ($0.details["reason"]?.utf8.count ?? 0) <= 1024 })
        // Each written request is 2 rows per permission (received, answered).
        let recordedRequests = Set(written.compactMap { $0.details["request_id"] }).count
        #expect(recordedRequests >= 1 && recordedRequests < answered)

        // Another user is not held back by mallory's flood.
        #expect(try bob.withoutTerminal(["request", "camera", "--socket", daemon.socketPath]).status != 0)
        let bobs = try rows(of: bob)
        #expect(bobs.count == 2, "\(bobs)")

        // The next window: written again, carrying how many were left out.
        let next = started.addingTimeInterval(Double(window) + 0.5)
        while Date() < next { usleep(100_000) }
        _ = try mallory.withoutTerminal(["request", "camera", "--socket", daemon.socketPath])
        let after = try rows(of: mallory)
        let carried = after.dropFirst(written.count).first
        #expect(carried?.details["attempts_not_recorded_before"] == String(answered - recordedRequests),
                "\(carried?.details ?? [:])")
        #expect(try ledger.events().count - rowsBefore < 120)
    }
}
