import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// The CLI dies like kill -9 (`_exit(137)` through the DEBUG-only DEVACCESS_TEST_CRASH_AT
/// hook) on either side of an ACL edit; reconcile must converge with nothing lost, and
/// the audit chain must stay intact.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: test users, device nodes, ACLs"))
struct CrashRecoveryTests {
    private func crash(_ fx: AdminFixture, at point: String, _ words: [String]) throws {
        let result = try fx.run(words, extra: ["DEVACCESS_TEST_CRASH_AT": point])
        #expect(result.status == 137, "\(words) should have died at \(point): \(result.stderr)")
    }

    private func acl(_ fx: AdminFixture) throws -> [[String: Any]] {
        let object = try fx.json(try fx.run(["reconcile", "--json"]))
        return object["changes"] as? [[String: Any]] ?? []
    }

    @Test func grantKilledBeforeTheACLEditIsCompletedByReconcile() throws {
        let fx = try AdminFixture("crashga")
        let node = try fx.camera("video0")
        try crash(fx, at: "after-ledger-write", ["grant", "camera", "--user", fx.alice.name])
        // The grant and the intent are in the ledger; the node is not changed yet.
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.run(["list"]).stdout.contains(fx.alice.name))
        #expect(try fx.sql("SELECT count(*) FROM acl_entries").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1")

        let changes = try acl(fx)
        #expect(changes.map { $0["action"] as? String } == ["aclAdded"])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.run(["audit", "--verify"]).status == 0)
    }

    @Test func grantKilledAfterTheACLEditNeedsNothingMore() throws {
        let fx = try AdminFixture("crashgb")
        let node = try fx.camera("video0")
        try crash(fx, at: "after-acl-edit", ["grant", "camera", "--user", fx.alice.name])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try acl(fx).isEmpty)
        #expect(try fx.alice.canOpen(node, .readWrite))
        // The entry is devaccess's (recorded), so a revoke removes it.
        #expect(try fx.run(["revoke", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try !fx.alice.canOpen(node, .read))
    }

    @Test func revokeKilledBeforeTheACLEditIsCompletedByReconcile() throws {
        let fx = try AdminFixture("crashra")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        try crash(fx, at: "after-ledger-write", ["revoke", "camera", "--user", fx.alice.name])
        // Revoked in the ledger, entry still on the node: status calls it drift.
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.run(["list"]).stderr.contains("no standing decisions"))
        #expect(try acl(fx).map { $0["action"] as? String } == ["aclRemoved"])
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.sql("SELECT count(*) FROM acl_entries").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(try fx.run(["audit", "--verify"]).status == 0)
    }

    @Test func revokeKilledAfterTheACLEditIsCompletedByReconcile() throws {
        let fx = try AdminFixture("crashrb")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        try crash(fx, at: "after-acl-edit", ["revoke", "camera", "--user", fx.alice.name])
        #expect(try !fx.alice.canOpen(node, .read))
        // The record outlived the entry; reconcile drops it without touching the node again.
        #expect(try acl(fx).map { $0["action"] as? String } == ["recordDropped"])
        #expect(try fx.sql("SELECT count(*) FROM acl_entries").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(try acl(fx).isEmpty)
        #expect(try fx.run(["audit", "--verify"]).status == 0)
    }

    @Test func expiryKilledMidwayIsCompletedByReconcile() throws {
        let fx = try AdminFixture("crashex")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--for", "1s"]).status == 0)
        Thread.sleep(forTimeInterval: 1.2)
        try crash(fx, at: "after-ledger-write", ["reconcile"])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try acl(fx).map { $0["action"] as? String } == ["aclRemoved"])
        #expect(try !fx.alice.canOpen(node, .read))
    }
}
