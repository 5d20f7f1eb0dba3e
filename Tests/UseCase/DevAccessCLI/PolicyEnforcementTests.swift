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

/// `status` and `doctor` say who opens capture nodes without devaccess: the node's group
/// and its members, ACL entries devaccess did not make (its own are not listed), and
/// whether the opt-in deny-by-default rules are in force. (The seat user through
/// `uaccess` needs udev: the VM scenarios check that.)
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: test users, groups, device nodes, ACLs"))
struct GateReportTests {
    @Test func statusNamesGroupMembersAndForeignEntriesButNotDevaccessOwn() throws {
        let fx = try AdminFixture("gate")
        let bob = try TestUser("gatebob")
        let carol = try TestUser("gatecarol")
        let crew = try TestGroup("gate", members: [fx.alice])
        let node = try fx.camera("video0", group: crew.name, mode: "0660")
        #expect(try fx.run(["grant", "camera", "--user", bob.name]).status == 0)
        try TestProcess.setup("setfacl", ["-m", "u:\(carol.name):rw", node])

        let status = try fx.json(try fx.run(["status", "camera", "--json"]))
        let gate = try #require(status["gate"] as? [String: Any], "\(status)")
        #expect(gate["effective"] as? Bool == false)
        let rules = try #require(gate["denyByDefault"] as? [String: Any])
        #expect(rules["file"] as? String == "72-devaccess-deny-by-default.rules")
        #expect(rules["active"] as? Bool == false)
        let nodes = try #require(gate["nodes"] as? [[String: Any]])
        #expect(nodes.count == 1)
        #expect(nodes.first?["node"] as? String == node)
        let without = try #require(nodes.first?["without"] as? [[String: Any]])
        let group = without.first { $0["kind"] as? String == "group" }
        #expect(group?["name"] as? String == crew.name, "\(without)")
        #expect(group?["members"] as? [String] == [fx.alice.name], "\(without)")
        #expect(group?["access"] as? String == "rw-", "the wire's word for an access mode: \(without)")
        let users = without.filter { $0["kind"] as? String == "aclUser" }
        #expect(users.map { $0["name"] as? String } == [carol.name], "devaccess's own entry for bob is not listed: \(without)")
        #expect(users.first?["devaccess"] as? Bool == false)
        #expect(!without.contains { $0["kind"] as? String == "other" || $0["kind"] as? String == "owner" })

        let text = try fx.run(["status", "camera"])
        #expect(text.stdout.contains("without devaccess: 1 of 1 capture node(s) can be opened without devaccess"),
                "\(text.stdout)")
        // Who opens each node is node-level: in the verbose form (the default has the summary).
        let verbose = try fx.run(["status", "camera", "-v"])
        #expect(verbose.stdout.contains("members of group '\(crew.name)' (\(fx.alice.name))"), "\(verbose.stdout)")
        #expect(!text.stdout.contains("members of group '\(crew.name)'"), "\(text.stdout)")

        let doctor = try fx.json(try fx.run(["doctor", "--json"]))
        let checks = (doctor["checks"] as? [[String: Any]]) ?? []
        let gateCheck = checks.first { $0["name"] as? String == "gate" }
        #expect(gateCheck?["status"] as? String == "warn", "\(checks)")
        #expect((gateCheck?["message"] as? String)?.contains("members of group '\(crew.name)'") == true, "\(checks)")
        #expect(checks.first { $0["name"] as? String == "deny-default" }?["status"] as? String == "warn")

        // Closed to everyone but devaccess: the group loses its bits, carol's entry goes.
        try TestProcess.setup("setfacl", ["-x", "u:\(carol.name)", node])
        try TestProcess.setup("chmod", ["g-rw", node])
        let closed = try fx.json(try fx.run(["status", "camera", "--json"]))
        #expect((closed["gate"] as? [String: Any])?["effective"] as? Bool == true, "\(closed)")
    }
}
