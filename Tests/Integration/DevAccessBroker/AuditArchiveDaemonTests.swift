import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// Audit retention through the one writer: an admin archives old events through
/// devaccessd, both files verify, tampering with either is named, a plain user is
/// refused (and audited), and `--offline` is refused while the daemon runs.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups, nodes and ACLs"))
struct AuditArchiveDaemonTests {
    /// A whole second after now, as ISO 8601 UTC; returns once that second has passed.
    static func boundary() -> (text: String, date: Date) {
        let date = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 1).rounded(.up))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        while Date() <= date.addingTimeInterval(0.05) { usleep(20_000) }
        return (formatter.string(from: date), date)
    }

    @Test func anAdminArchivesThroughTheDaemonAndBothFilesVerify() throws {
        let carol = try TestUser("arcadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n[microphone]\nDefault=deny\n", admins: [carol])
        let erin = try TestUser("arcuser")
        let mallory = try TestUser("arcnosy")
        let socket = setup.socket

        // Old events, then the boundary, then newer ones.
        for _ in 0..<3 {
            #expect(try erin.withoutTerminal(["request", "camera", "--always"] + socket).status == 0)
            #expect(try carol.devaccess(["revoke", "camera", "--user", erin.name] + socket).status == 0)
        }
        let (before, boundary) = Self.boundary()
        #expect(try erin.withoutTerminal(["request", "camera", "--always"] + socket).status == 0)
        let events = try setup.ledger().events()
        let old = events.filter { $0.event.time < boundary }
        let newer = events.filter { $0.event.time >= boundary }
        #expect(old.count >= 6 && !newer.isEmpty, "\(old.count) old, \(newer.count) newer")

        // A plain user: refused, audited. Root --offline: refused while the daemon runs.
        let refusedBefore = try setup.ledger().events().filter { $0.event.type == .refused }.count
        let nosy = try mallory.devaccess(["audit", "--archive", "1s"] + socket)
        #expect(nosy.status == 77, "\(nosy.stderr)")
        #expect(nosy.stderr.contains("may not archive"), "\(nosy.stderr)")
        let refusals = try setup.ledger().events().map(\.event).filter { $0.type == .refused }
        #expect(refusals.count == refusedBefore + 1)
        #expect(refusals.last?.actor?.uid == mallory.uid && refusals.last?.details["operation"] == "audit-archive")
        let offline = try TestProcess.devaccess(["audit", "--archive", before, "--offline", "--state-dir",
                                                 setup.stateDirectory, "--socket", setup.daemon.socketPath])
        #expect(offline.status == 75, "\(offline.stderr)")
        #expect(try setup.ledger().events().count == events.count + 1, "only mallory's refusal was added")

        // carol (admin group, not root) may not choose the file, nor have root open any file.
        let elsewhere = try TemporaryDirectory()
        let chosen = try carol.devaccess(["audit", "--archive", before, "--to", elsewhere.path + "/a.db"] + socket)
        #expect(chosen.status == 77, "\(chosen.stderr)")
        let peek = try carol.devaccess(["audit", "--verify", "--archive-file", "/etc/shadow"] + socket)
        #expect(peek.status == 77, "\(peek.stderr)")

        // Through the daemon: the old events move.
        let archived = try carol.devaccess(["audit", "--archive", before, "--json"] + socket)
        #expect(archived.status == 0, "\(archived.stderr)")
        let document = try json(archived.stdout)
        let path = try #require(document["archive"] as? String)
        #expect(path.hasPrefix(setup.stateDirectory + "/audit-archive-"), "\(path)")
        #expect(document["events"] as? Int == old.count)
        #expect(document["firstSeq"] as? Int == 1)
        #expect(document["lastSeq"] as? Int == Int(old.last?.seq ?? 0))
        #expect(document["anchorHash"] as? String == old.last?.hash)
        let remaining = try setup.ledger().events()
        #expect(remaining.first?.seq == (old.last?.seq ?? 0) + 1)
        #expect(remaining.last?.event.type == .archived)
        #expect(remaining.last?.event.actor?.uid == carol.uid)

        // Both verify, through the daemon, for carol.
        let verify = try carol.devaccess(["audit", "--verify", "--json"] + socket)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        let verified = try json(verify.stdout)
        #expect(verified["intact"] as? Bool == true)
        #expect(verified["archivedThrough"] as? Int == Int(old.last?.seq ?? 0))
        let both = try carol.devaccess(["audit", "--verify", "--archive-file", path] + socket)
        #expect(both.status == 0, "\(both.stdout) \(both.stderr)")
        #expect(both.stdout.contains("archive intact: events 1...\(old.last?.seq ?? 0)"), "\(both.stdout)")

        // A copy of the archive with one event edited: root names any file; the event is named.
        let copy = elsewhere.path + "/tampered.db"
        try TestProcess.setup("cp", [path, copy])
        let edited = try TestProcess.run("/usr/bin/sqlite3", [copy, "UPDATE audit_events SET actor_name = 'x' WHERE seq = 3"])
        #expect(edited.status == 0, "\(edited.stderr)")
        let tampered = try TestProcess.devaccess(["audit", "--verify", "--archive-file", copy] + socket)
        #expect(tampered.status == 65, "\(tampered.stdout) \(tampered.stderr)")
        #expect(tampered.stdout.contains("archive chain broken: event 3 edited"), "\(tampered.stdout)")
        // One deleted in the middle.
        try TestProcess.setup("cp", [path, "\(copy)2"])
        #expect(try TestProcess.run("/usr/bin/sqlite3", [copy + "2", "DELETE FROM audit_events WHERE seq = 4"]).status == 0)
        let gap = try TestProcess.devaccess(["audit", "--verify", "--archive-file", copy + "2", "--json"] + socket)
        #expect(gap.status == 65, "\(gap.stdout) \(gap.stderr)")
        let gapArchive = try json(gap.stdout)["archive"] as? [String: Any]
        #expect(gapArchive?["brokenAt"] as? Int == 4 && gapArchive?["kind"] as? String == "removed", "\(gap.stdout)")

        // Daemon down: root archives the rest --offline to a file of its choice; then the
        // ledger is tampered with and verify names the event.
        try setup.stop()
        let (now, _) = Self.boundary()
        let second = elsewhere.path + "/second.db"
        let offlineArchive = try TestProcess.devaccess(["audit", "--archive", now, "--to", second, "--offline",
                                                        "--state-dir", setup.stateDirectory, "--socket",
                                                        setup.daemon.socketPath])
        #expect(offlineArchive.status == 0, "\(offlineArchive.stderr)")
        #expect(offlineArchive.stdout.hasPrefix("archived "), "\(offlineArchive.stdout)")
        let offlineVerify = try TestProcess.devaccess(["audit", "--verify", "--archive-file", second, "--offline",
                                                       "--state-dir", setup.stateDirectory, "--socket",
                                                       setup.daemon.socketPath])
        #expect(offlineVerify.status == 0, "\(offlineVerify.stdout) \(offlineVerify.stderr)")
        let ledgerPath = setup.stateDirectory + "/" + Ledger.fileName
        let kept = try setup.ledger().events()
        let target = try #require(kept.first?.seq)
        #expect(try TestProcess.run("/usr/bin/sqlite3", [ledgerPath, "UPDATE audit_events SET details = '{}' WHERE seq = \(target)"])
            .status == 0)
        let broken = try TestProcess.devaccess(["audit", "--verify", "--offline", "--state-dir", setup.stateDirectory,
                                                "--socket", setup.daemon.socketPath])
        #expect(broken.status == 65, "\(broken.stdout) \(broken.stderr)")
        #expect(broken.stdout.contains("broken at event \(target)"), "\(broken.stdout)")
        // A broken chain is not archived further.
        let refused = try TestProcess.devaccess(["audit", "--archive", now, "--offline", "--state-dir",
                                                 setup.stateDirectory, "--socket", setup.daemon.socketPath])
        #expect(refused.status == 74, "\(refused.stderr)")
        #expect(refused.stderr.contains("broken"), "\(refused.stderr)")
    }

    @Test func badBeforeAndTargetsAreRefusedWithAReason() throws {
        let daemon = try RunningDaemon()
        let socket = ["--socket", daemon.socketPath]
        for bad in ["90", "yesterday", "2026-13-01T00:00Z", "2026-09-01"] {
            let run = try TestProcess.devaccess(["audit", "--archive", bad] + socket)
            #expect(run.status == 64, "\(bad): \(run.stderr)")
            #expect(run.stderr.contains("duration") && run.stderr.contains("ISO 8601"), "\(bad): \(run.stderr)")
        }
        let future = try TestProcess.devaccess(["audit", "--archive", "2999-01-01T00:00Z"] + socket)
        #expect(future.status == 64 && future.stderr.contains("future"), "\(future.stderr)")
        // A symlink as the target: refused, nothing written through it, nothing moved.
        let user = try TestUser("arclink")
        #expect(try user.devaccess(["reset", "--user", "root"] + socket).status == 77)  // one old event
        let (before, _) = Self.boundary()
        let scratch = try TemporaryDirectory()
        #expect(symlink(scratch.path + "/victim", scratch.path + "/link.db") == 0)
        let linked = try TestProcess.devaccess(["audit", "--archive", before, "--to", scratch.path + "/link.db"] + socket)
        #expect(linked.status == 64, "\(linked.stderr)")
        #expect(linked.stderr.contains("never overwritten"), "\(linked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/victim"))
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        #expect(try ledger.events().first?.seq == 1)
    }
}
