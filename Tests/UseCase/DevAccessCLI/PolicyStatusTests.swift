import Foundation
import Testing
import DevAccessTestSupport

/// Policy reaches status: a `deny` rule makes the permission `restricted` even for a
/// user who can open the node, and a broken configuration is reported, not fatal.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users and device nodes"))
struct PolicyStatusTests {
    @Test func denyRuleMakesTheStatusRestricted() throws {
        let fixture = try AdminFixture("pol")
        let config = try TemporaryDirectory()
        try fixture.camera("cam0", mode: "0666")
        try Data("[camera]\nDefault=ask\n[Rule]\nUser=\(fixture.alice.name)\nAction=deny\n".utf8)
            .write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        let environment = ["DEVACCESS_CONFIG_DIR": config.path]

        let check = try fixture.run(["check", "camera", "--user", fixture.alice.name], extra: environment)
        #expect(check.status == 5, "check: \(check.stderr)")
        let status = try fixture.json(try fixture.run(["status", "camera", "--user", fixture.alice.name, "--json"],
                                                      extra: environment))
        let camera = try #require((status["permissions"] as? [[String: Any]])?.first)
        #expect(camera["status"] as? String == "restricted")
        let reasons = (camera["reasons"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
        #expect(reasons.contains("policy forbids camera for \(fixture.alice.name) (\(config.path)/devaccess.conf:3)"))
        // Without the rule the same node is open to everyone.
        #expect(try fixture.run(["check", "camera", "--user", fixture.alice.name]).status == 0)
    }

    @Test func brokenPolicyIsReportedAndStatusStillAnswers() throws {
        let fixture = try AdminFixture("polbad")
        let config = try TemporaryDirectory()
        try fixture.camera("cam0", mode: "0666")
        try Data("[camera]\nDefault=sometimes\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        let output = try fixture.run(["status", "camera", "--user", fixture.alice.name, "--json"],
                                     extra: ["DEVACCESS_CONFIG_DIR": config.path])
        #expect(output.status == 0)
        let camera = try #require((try fixture.json(output)["permissions"] as? [[String: Any]])?.first)
        #expect(camera["status"] as? String == "authorized")
        let reasons = (camera["reasons"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
        #expect(reasons.contains { $0.contains("the policy cannot be read") && $0.contains("devaccess.conf:2") })
        // A broken edit must not read as a policy that restricts nothing: devaccessd keeps the last good one.
        #expect(reasons.contains { $0.contains("keeps enforcing the last policy that parsed") }, "\(reasons)")
    }
}
