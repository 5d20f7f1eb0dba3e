import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// grant / deny / revoke / reconcile / status through the real binary, checked by real
/// opens as the user.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: test users, device nodes, ACLs"))
struct EnforcementCommandTests {
    @Test func grantOpensRevokeCloses() throws {
        let fx = try AdminFixture("cligrant")
        let node = try fx.camera("video0")
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 4)

        let grant = try fx.run(["grant", "camera", "--user", fx.alice.name])
        #expect(grant.status == 0, "\(grant.stderr)")
        #expect(grant.stdout.contains("recorded grant 1: allow camera for \(fx.alice.name)"))
        #expect(grant.stdout.contains("added user:\(fx.alice.name):rw- on \(node)"))
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 0)

        let revoke = try fx.run(["revoke", "camera", "--user", fx.alice.name])
        #expect(revoke.status == 0, "\(revoke.stderr)")
        #expect(revoke.stdout.contains("removed user:\(fx.alice.name):rw- from \(node)"))
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 4)
        #expect(try fx.run(["audit", "--verify"]).status == 0)
    }

    @Test func timedGrantEndsAtReconcile() throws {
        let fx = try AdminFixture("clitimed")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--for", "2s"]).status == 0)
        #expect(try fx.alice.canOpen(node, .readWrite))
        Thread.sleep(forTimeInterval: 2.2)
        let result = try fx.run(["reconcile", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try fx.json(result)
        #expect((report["expired"] as? [[String: Any]])?.map { $0["id"] as? Int } == [1])
        let changes = try #require(report["changes"] as? [[String: Any]])
        #expect(changes.map { $0["action"] as? String } == ["aclRemoved"])
        #expect(changes.first?["node"] as? String == node)
        #expect(changes.first?["uid"] as? Int == Int(fx.alice.uid))
        #expect(try !fx.alice.canOpen(node, .read))
    }

    @Test func replugIsRepairedByReconcile() throws {
        let fx = try AdminFixture("clireplug")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        try TestProcess.setup("rm", ["-f", node])
        _ = try fx.nodes.makeNullNode("video0")
        #expect(try !fx.alice.canOpen(node, .read))
        let status = try fx.json(try fx.run(["status", "camera", "--user", fx.alice.name, "--json"]))
        let drift = (status["permissions"] as? [[String: Any]])?.first?["drift"] as? [[String: Any]]
        #expect(drift?.count == 1)
        let reconcile = try fx.run(["reconcile"])
        #expect(reconcile.status == 0)
        #expect(reconcile.stdout.contains("added user:\(fx.alice.name):rw- on \(node)"))
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.run(["reconcile"]).stdout.contains("nothing to change"))
    }

    @Test func denyIsDeniedDespiteAGroupAndTheDriftIsShown() throws {
        let fx = try AdminFixture("clideny")
        let crew = try TestGroup("clideny", members: [fx.alice])
        let node = try fx.camera("video0", group: crew.name, mode: "0660")
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 0)

        let deny = try fx.run(["deny", "camera", "--user", fx.alice.name])
        #expect(deny.status == 0, "\(deny.stderr)")
        #expect(deny.stdout.contains("drift: grant 1 denies \(fx.alice.name) camera"))
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 3)

        let status = try fx.json(try fx.run(["status", "camera", "--user", fx.alice.name, "--json"]))
        let camera = try #require((status["permissions"] as? [[String: Any]])?.first)
        #expect(camera["status"] as? String == "denied")
        let drift = try #require(camera["drift"] as? [[String: Any]])
        #expect(drift.count == 1)
        let message = drift.first?["message"] as? String ?? ""
        #expect(drift.first?["kind"] as? String == "drift")
        #expect(message.contains("through group '\(crew.name)'"))
        let reasons = try #require(camera["reasons"] as? [[String: Any]])
        #expect(reasons.first?["kind"] as? String == "ledger")
        #expect(reasons.contains { $0["kind"] as? String == "drift" && $0["message"] as? String == message })

        let table = try fx.run(["status", "camera", "--user", fx.alice.name])
        #expect(table.stdout.contains("denied"))
        #expect(table.stdout.components(separatedBy: "! drift:").count == 2)
    }

    /// The ledger is root's alone: with no devaccessd to ask, a user's status says the
    /// decisions are unknown and comes from the nodes (with a daemon, the broker answers:
    /// OneWriterTests); root reads the ledger itself.
    @Test func usersWithoutADaemonAreToldTheirDecisionsAreUnknown() throws {
        let fx = try AdminFixture("cliself")
        let node = try fx.camera("video0")
        #expect(try fx.run(["deny", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try !fx.alice.canOpen(fx.ledgerPath, .read))
        #expect(try fx.run(as: fx.alice, ["check", "camera"]).status == 4, "not denied: the denial cannot be read")
        let status = try fx.run(as: fx.alice, ["status", "camera"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("decisions unknown: devaccessd not reachable"), "\(status.stdout)")
        #expect(!status.stdout.contains("grant 1 denies"))
        #expect(try !fx.alice.canOpen(node, .read))
        let root = try fx.run(["status", "camera", "--user", fx.alice.name])
        #expect(root.stdout.contains("grant 1 denies \(fx.alice.name) camera"), "\(root.stdout)")
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 3)
    }

    /// After a program grant the summary says how the user gets the camera (issue 31: it said
    /// "nothing has been decided" beside the line showing the grant).
    @Test func aProgramGrantIsNamedInTheSummaryNotNothingDecided() throws {
        let fx = try AdminFixture("cliprog")
        try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--program", "/bin/sh"]).status == 0)
        let program = URL(fileURLWithPath: "/bin/sh").resolvingSymlinksInPath().path
        let status = try fx.run(["status", "camera", "--user", fx.alice.name])
        #expect(status.stdout.contains("\(fx.alice.name) cannot open any camera device directly, only through "
            + "'devaccess run' of \(program)"), "\(status.stdout)")
        #expect(!status.stdout.contains("nothing has been decided"), "\(status.stdout)")
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 4, "still notDetermined")
    }

    @Test func foreignEntryIsNeverRemoved() throws {
        let fx = try AdminFixture("cliforeign")
        let bob = try TestUser("clifb")
        let node = try fx.camera("video0")
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):rw", node])
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.run(["revoke", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.run(["reset", "--user", bob.name]).status == 0)
        let reconcile = try fx.json(try fx.run(["reconcile", "--json"]))
        let drift = try #require(reconcile["drift"] as? [[String: Any]])
        #expect(drift.map { $0["kind"] as? String } == ["entryWithoutGrant"])
        #expect(drift.first?["user"] as? String == bob.name)
        #expect(try fx.getfacl(node).contains("user:\(bob.uid):rw-"))
        #expect(try bob.canOpen(node, .readWrite))
    }

    @Test func plantedSymlinkIsRefusedWithExitCode1() throws {
        let fx = try AdminFixture("cliplant")
        let target = try fx.nodes.makeNullNode("target")
        let before = try fx.getfacl(target)
        let link = fx.nodes.path + "/video0"
        try TestProcess.setup("ln", ["-s", target, link])
        try fx.declare(name: "video0", path: link)
        let result = try fx.run(["grant", "camera", "--user", fx.alice.name])
        #expect(result.status == 1)
        #expect(result.stdout.contains("recorded grant 1"))
        #expect(result.stderr.contains("refused: \(link)"))
        #expect(result.stderr.contains("symlink, not a character device"))
        #expect(try fx.getfacl(target) == before)
        #expect(try !fx.alice.canOpen(link, .read))
        #expect(try fx.run(["reconcile"]).status == 1)
    }
}
