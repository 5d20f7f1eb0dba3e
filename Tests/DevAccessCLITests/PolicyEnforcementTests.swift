import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// A policy `deny` is enforced, not only shown: `reconcile --offline` ends devaccess's own
/// grants the policy forbids (recorded as ended by policy, with the rule) and removes their
/// entries; access the node still gives through a group is drift, in reconcile and status.
/// Real users, real nodes (mknod 1:3), real opens.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: test users, groups, device nodes, ACLs"))
struct PolicyEnforcementTests {
    /// A configuration directory whose drop-in `50-deny.conf` holds `text`.
    static func policy(_ text: String) throws -> TemporaryDirectory {
        let config = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: true)
        try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        try Data(text.utf8).write(to: URL(fileURLWithPath: config.path + "/conf.d/50-deny.conf"))
        return config
    }

    @Test func aPolicyDenyEndsTheGrantAndRemovesItsEntryAtOfflineReconcile() throws {
        let fx = try AdminFixture("polend")
        let node = try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.alice.canOpen(node, .readWrite))

        // Root writes a drop-in that denies her the camera.
        let config = try Self.policy("[Rule]\nPermission=camera\nUser=\(fx.alice.name)\nAction=deny\n")
        let reconcile = try fx.run(["reconcile", "--json"], extra: ["DEVACCESS_CONFIG_DIR": config.path])
        #expect(reconcile.status == 0, "\(reconcile.stderr)")
        let report = try fx.json(reconcile)
        let ended = try #require(report["endedByPolicy"] as? [[String: Any]], "\(reconcile.stdout)")
        #expect(ended.count == 1)
        #expect((ended.first?["grant"] as? [String: Any])?["id"] as? Int == 1)
        #expect((ended.first?["rule"] as? String)?.hasSuffix("conf.d/50-deny.conf:1") == true, "\(ended)")
        #expect((ended.first?["reason"] as? String)?.contains("policy forbids camera for \(fx.alice.name)") == true)
        let changes = try #require(report["changes"] as? [[String: Any]])
        #expect(changes.map { $0["action"] as? String } == ["aclRemoved"])
        #expect((changes.first?["message"] as? String)?.contains("grant 1 was ended: policy forbids camera") == true,
                "\(changes)")
        let acl = try fx.getfacl(node)
        #expect(!acl.contains("user:\(fx.alice.uid):"), "\(acl)")
        #expect(try !fx.alice.canOpen(node, .read))

        // The ledger says who ended it and why.
        let event = try fx.sql("SELECT type, actor_name, details FROM audit_events WHERE type = 'revoke'").stdout
        #expect(event.contains("revoke|root|"), "\(event)")
        #expect(event.contains("\"ended_by\":\"policy\""), "\(event)")
        #expect(event.contains("50-deny.conf:1"), "\(event)")
        let ended1 = try fx.sql("SELECT revoked_usec IS NOT NULL FROM grants WHERE id = 1").stdout
        #expect(ended1.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(ended1)")
        #expect(try fx.run(["audit", "--verify"]).status == 0)

        // Nothing left to do: a second run changes nothing.
        let again = try fx.run(["reconcile"], extra: ["DEVACCESS_CONFIG_DIR": config.path])
        #expect(again.stdout.contains("nothing to change"), "\(again.stdout)")
    }

    @Test func aGrantThePolicyForbidsIsRefusedAndNothingIsRecorded() throws {
        let fx = try AdminFixture("polrefuse")
        let node = try fx.camera("video0")
        let config = try Self.policy("[Rule]\nPermission=camera\nUser=\(fx.alice.name)\nAction=deny\n")
        let grant = try fx.run(["grant", "camera", "--user", fx.alice.name], extra: ["DEVACCESS_CONFIG_DIR": config.path])
        #expect(grant.status == 77, "\(grant.stdout) \(grant.stderr)")
        #expect(grant.stderr.contains("policy forbids camera for \(fx.alice.name)"), "\(grant.stderr)")
        #expect(grant.stderr.contains("50-deny.conf:1"), "\(grant.stderr)")
        #expect(try fx.sql("SELECT COUNT(*) FROM grants").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(try !fx.alice.canOpen(node, .read))
    }

    /// Like `video`: a group that opens the node. The policy forbids the camera to its
    /// member; devaccess does not touch groups, so it says so, as drift.
    @Test func groupAccessUnderAPolicyDenyIsDriftInReconcileAndStatus() throws {
        let fx = try AdminFixture("polgroup")
        let crew = try TestGroup("polgroup", members: [fx.alice])
        let node = try fx.camera("video0", group: crew.name, mode: "0660")
        let config = try Self.policy("[Rule]\nPermission=camera\nGroup=\(crew.name)\nAction=deny\n")
        let environment = ["DEVACCESS_CONFIG_DIR": config.path]
        #expect(try fx.alice.canOpen(node, .readWrite))

        let reconcile = try fx.run(["reconcile", "--json"], extra: environment)
        #expect(reconcile.status == 0, "\(reconcile.stderr)")
        let drift = try #require(try fx.json(reconcile)["drift"] as? [[String: Any]], "\(reconcile.stdout)")
        let hers = drift.filter { $0["uid"] as? Int == Int(fx.alice.uid) }
        #expect(hers.count == 1, "\(drift)")
        #expect(hers.first?["kind"] as? String == "accessDespitePolicy")
        #expect(hers.first?["node"] as? String == node)
        let message = hers.first?["message"] as? String ?? ""
        #expect(message.contains("policy forbids camera for \(fx.alice.name)"), "\(message)")
        #expect(message.contains("50-deny.conf:1"), "\(message)")
        #expect(message.contains("through group '\(crew.name)'"), "\(message)")

        let text = try fx.run(["reconcile"], extra: environment)
        #expect(text.stdout.contains("drift: policy forbids camera for \(fx.alice.name)"), "\(text.stdout)")

        let status = try fx.json(try fx.run(["status", "camera", "--user", fx.alice.name, "--json"], extra: environment))
        let camera = try #require((status["permissions"] as? [[String: Any]])?.first)
        #expect(camera["status"] as? String == "restricted")
        let statusDrift = try #require(camera["drift"] as? [[String: Any]], "\(camera)")
        #expect(statusDrift.count == 1)
        #expect((statusDrift.first?["message"] as? String)?.contains("can open \(node)") == true, "\(statusDrift)")
        let reasons = (camera["reasons"] as? [[String: Any]]) ?? []
        #expect(reasons.contains { $0["kind"] as? String == "drift" }, "\(reasons)")
        // Devaccess made nothing here, so it changes nothing: she still opens it through the group.
        #expect(try fx.alice.canOpen(node, .readWrite))
    }
}
