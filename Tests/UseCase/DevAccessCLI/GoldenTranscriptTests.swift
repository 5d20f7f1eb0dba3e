import Foundation
import Testing
import DevAccessTestSupport
import DevAccessSystem
@testable import DevAccessCLI

/// The CLI's face, byte for byte: stdout, stderr and exit code of `devaccess` on fixed
/// scenarios that depend on nothing of the machine (help, usage errors, a policy check of
/// fixed files). Taken before the one-contract refactor (issue 26) moves the commands onto
/// the contract, so a move that changes what a person sees fails here. An intended change
/// is recorded again with DEVACCESS_GOLDEN_RECORD=1 and reviewed in the diff of
/// Golden/cli-transcripts.txt.
@Suite struct GoldenTranscriptTests {
    static let golden = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Golden/cli-transcripts.txt").path
    /// A configuration directory at a fixed path, so its path in messages is the same on every machine.
    static let policyDirectory = "/tmp/devaccess-golden-policy"

    static let commands = [
        "status", "explain", "check", "devices", "monitor", "who", "request", "run", "pending", "approve", "reject",
        "withdraw", "grant", "deny", "revoke", "reset", "list", "reconcile", "switch", "location", "audit", "policy",
        "doctor", "completion",
    ]

    static var scenarios: [[String]] {
        [["--help"], ["help"], ["bogus"], []]
            + commands.map { [$0, "--help"] }
            + [
                ["status", "camra"], ["status", "--color", "sometimes"], ["check"], ["check", "camera", "microphone"],
                ["explain"], ["request"], ["request", "camera", "--once", "--always"], ["request", "camera", "--for", "soon"],
                ["run"], ["run", "--camera"], ["run", "--accuracy", "city", "--", "true"], ["grant", "camera"],
                ["grant", "camera", "--user"], ["approve"], ["approve", "x y"], ["audit", "--format", "xml"],
                ["audit", "--since", "yesterday-ish"], ["list", "--json", "--json"], ["switch", "camera", "sideways"],
                ["location", "--accuracy", "galaxy"], ["completion", "tcsh"], ["status", "--user"],
                ["policy", "check", policyDirectory], ["policy", "check", policyDirectory, "--json"],
                ["policy", "check", policyDirectory + "/missing"], ["policy", "check", policyDirectory + "/valid"],
                ["policy", "check", policyDirectory + "/valid", "--json"],
            ]
    }

    /// One scenario as text: the command, its exit code, then its stdout and stderr.
    static func transcript(_ arguments: [String]) throws -> String {
        let result = try TestProcess.run(TestProcess.devaccessBinary, arguments,
                                         environment: ["DEVACCESS_CONFIG_DIR": policyDirectory + "/missing",
                                                       "DEVACCESS_SOCKET": "/nonexistent/broker.sock",
                                                       "NO_COLOR": "1", "COLUMNS": "100", "LANG": "C.UTF-8"])
        // How to start devaccessd follows the machine (systemd or not): DaemonStartTests pins both.
        let stderr = result.stderr.replacingOccurrences(of: DaemonStart.advice(), with: "start it <as this machine does>")
        return "$ devaccess \(arguments.joined(separator: " "))\nexit \(result.status)\n--- stdout\n\(result.stdout)"
            + "--- stderr\n\(stderr)=== end\n"
    }

    static func writePolicy() throws {
        try? FileManager.default.removeItem(atPath: policyDirectory)
        try FileManager.default.createDirectory(atPath: policyDirectory + "/conf.d", withIntermediateDirectories: true)
        try Data("[camera]\nDefault=maybe\n\n[microphon]\nDefault=ask\n".utf8)
            .write(to: URL(fileURLWithPath: policyDirectory + "/devaccess.conf"))
        try Data("[location]\nDefault=allow\nMaxAccuracy=city\n".utf8)
            .write(to: URL(fileURLWithPath: policyDirectory + "/conf.d/10-site.conf"))
        // devaccess.conf(5)'s example, with a group and a program that exist on no machine (warnings).
        try FileManager.default.createDirectory(atPath: policyDirectory + "/valid", withIntermediateDirectories: true)
        try Data("""
            [camera]
            Default=ask
            MaxDuration=8h

            [Rule]
            Permission=camera microphone
            Group=devaccess-golden-students
            Action=auth_admin

            [Rule]
            Permission=location
            Program=/usr/bin/devaccess-golden-maps
            Action=allow

            """.utf8).write(to: URL(fileURLWithPath: policyDirectory + "/valid/devaccess.conf"))
    }

    @Test func theCommandLineSaysWhatItSaidBefore() throws {
        try Self.writePolicy()
        let now = try Self.scenarios.map(Self.transcript)
        if ProcessInfo.processInfo.environment["DEVACCESS_GOLDEN_RECORD"] == "1" {
            try Data(now.joined().utf8).write(to: URL(fileURLWithPath: Self.golden))
            return
        }
        let recorded = try String(contentsOfFile: Self.golden, encoding: .utf8)
            .components(separatedBy: "=== end\n").filter { !$0.isEmpty }.map { $0 + "=== end\n" }
        #expect(recorded.count == now.count, "scenarios: \(now.count), recorded: \(recorded.count)")
        for (before, after) in zip(recorded, now) where before != after {
            Issue.record("the CLI's output changed:\n--- recorded\n\(before)--- now\n\(after)")
        }
    }
}
