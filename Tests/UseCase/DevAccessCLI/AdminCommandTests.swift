import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// Admin commands seen from outside: help, usage errors naming the bad word, the root
/// check, and that a refused command writes nothing.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: admin commands, test users"))
struct AdminCommandTests {
    static let commands = ["grant", "deny", "revoke", "reset", "list", "reconcile", "audit"]

    @Test func everyAdminCommandHasHelp() throws {
        for command in Self.commands {
            let help = try TestProcess.devaccess([command, "--help"])
            #expect(help.status == 0, "\(command) --help")
            #expect(help.stdout.contains("Usage: devaccess \(command)"), "\(command) --help")
            #expect(help.stdout.contains("Exit codes"), "\(command) --help")
        }
        let top = try TestProcess.devaccess(["--help"])
        for command in Self.commands { #expect(top.stdout.contains("  \(command) ")) }
        #expect(top.stdout.contains("69 broker unreachable"))
        #expect(top.stdout.contains("77 refused"))
    }

    /// `--offline` is root's; without it and without a daemon the answer is 69, naming
    /// `--offline`. Either way nothing is written.
    @Test func nonRootOfflineGetsExitCode77AndNoDaemonGets69AndNothingIsWritten() throws {
        let fx = try AdminFixture("nonroot")
        try fx.camera("video0")
        let arguments: [[String]] = [
            ["grant", "camera", "--user", fx.alice.name], ["deny", "camera", "--user", fx.alice.name],
            ["revoke", "camera", "--user", fx.alice.name], ["reset", "--user", fx.alice.name], ["list"],
            ["reconcile"], ["audit", "--verify"], ["withdraw", "1"],
        ]
        for words in arguments {
            let offline = try fx.run(as: fx.alice, words + ["--offline"])
            #expect(offline.status == 77, "\(words): \(offline.stderr)")
            #expect(offline.stderr.contains("--offline' needs root"), "\(words): \(offline.stderr)")
            let noDaemon = try fx.run(as: fx.alice, words)
            #expect(noDaemon.status == 69, "\(words): \(noDaemon.stderr)")
            #expect(noDaemon.stderr.contains("cannot reach devaccessd"), "\(words): \(noDaemon.stderr)")
            #expect(noDaemon.stderr.contains("--offline"), "\(words): \(noDaemon.stderr)")
        }
        let rootNoDaemon = try TestProcess.devaccess(["grant", "camera", "--user", fx.alice.name],
                                                     environment: fx.environment)
        #expect(rootNoDaemon.status == 69, "\(rootNoDaemon.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fx.ledgerPath))
        // --state-dir is a local ledger's: without --offline it is a usage error.
        let stray = try TestProcess.devaccess(["list", "--state-dir", fx.state.path], environment: fx.environment)
        #expect(stray.status == 64, "\(stray.stderr)")
    }

    @Test func badInputIsAUsageErrorNamingTheWord() throws {
        let fx = try AdminFixture("usage")
        try fx.camera("video0")
        let user = fx.alice.name
        let cases: [([String], String)] = [
            (["grant", "camera", "--user", user, "--for", "5x"], "'5x' is not a duration"),
            (["grant", "camera", "--user", user, "--for", "90"], "'90' is not a duration"),
            (["grant", "camera", "--user", user, "--for", "0s"], "'0s' is not a duration"),
            (["grant", "camera", "--user", user, "--for", "99999999999d"], "'99999999999d' is not a duration"),
            (["grant", "camera", "--user", user, "--until", "tomorrow"], "'tomorrow' is not a time for '--until'"),
            (["grant", "camera", "--user", user, "--until", "2026-02-30T10:00Z"], "'2026-02-30T10:00Z' is not a time"),
            (["grant", "camera", "--user", user, "--until", "2020-01-01T00:00:00Z"], "is not in the future"),
            (["grant", "camera", "--user", user, "--for", "1h", "--always"], "'--for' and '--always' cannot be combined"),
            (["grant", "camra", "--user", user], "unknown permission 'camra' (did you mean 'camera'?)"),
            (["grant", "camera"], "missing '--user USER'"),
            (["grant", "camera", "--user", "no-such-user-xyz"], "no user named 'no-such-user-xyz'"),
            (["grant", "camera", "--user", user, "--device", "camera:nope"], "no camera device with id 'camera:nope'"),
            (["deny", "camera", "microphone", "--user", user], "deny takes one PERMISSION"),
            (["revoke", "camera", "--user", ""], "empty '--user'"),
            (["reset", "camera", "location", "--user", user], "reset takes at most one PERMISSION"),
            (["list", "--permission", "gps"], "unknown permission 'gps'"),
            // `audit` alone is the report now (issue 13); its own bad words are usage errors.
            (["audit", "--format", "xml"], "'--format xml' is not a report format"),
            (["audit", "--since", "tomorrow"], "'--since tomorrow' is not a time"),
            (["audit", "--verify", "--summary"], "'--summary' is a report option"),
            (["reconcile", "now"], "unexpected argument 'now'"),
            (["grant", "camera", "--user", user, "--frm", "1h"], "unknown option '--frm' (did you mean '--for'?)"),
        ]
        for (words, message) in cases {
            let result = try fx.run(words)
            #expect(result.status == 64, "\(words): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(words): \(result.stderr)")
        }
        // None of them wrote a decision (the one that got as far as the device check opened the ledger).
        let list = try fx.run(["list", "--all", "--json"])
        #expect(list.status == 0)
        #expect((try fx.json(list)["grants"] as? [Any])?.isEmpty == true)
    }

    @Test func timesAndDurationsAreAccepted() throws {
        let fx = try AdminFixture("terms")
        try fx.camera("video0")
        for term in [["--for", "90s"], ["--for", "1h30m"], ["--until", "2099-12-01T18:00:00Z"],
                     ["--until", "2099-12-01T18:00+01:00"], ["--until", "2099-12-01T18:00"], ["--always"], []] {
            let result = try fx.run(["grant", "camera", "--user", fx.alice.name] + term)
            #expect(result.status == 0, "\(term): \(result.stderr)")
        }
        let list = try fx.json(try fx.run(["list", "--all", "--json"]))
        let grants = try #require(list["grants"] as? [[String: Any]])
        #expect(grants.count == 7)
        let offset = grants.first { $0["expires"] as? String == "2099-12-01T17:00:00Z" }
        #expect(offset != nil)
    }

    @Test func listJSONHasTheDocumentedShape() throws {
        let fx = try AdminFixture("list")
        try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--for", "1h", "--reason", "exam"]).status == 0)
        #expect(try fx.run(["revoke", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.run(["deny", "microphone", "--user", String(fx.alice.uid)]).status == 0)

        let standing = try fx.json(try fx.run(["list", "--json"]))
        #expect(standing["ledger"] as? String == fx.ledgerPath)
        let grants = try #require(standing["grants"] as? [[String: Any]])
        #expect(grants.count == 1)
        let denial = try #require(grants.first)
        #expect(denial["permission"] as? String == "microphone")
        #expect(denial["decision"] as? String == "deny")
        #expect(denial["scope"] as? String == "always")
        #expect(denial["user"] as? String == fx.alice.name)
        #expect(denial["uid"] as? Int == Int(fx.alice.uid))
        #expect(denial["active"] as? Bool == true)
        #expect(denial["decidedBy"] as? String == "root")
        #expect(denial["how"] as? String == "admin")
        #expect(denial["expires"] == nil && denial["device"] == nil)

        let all = try #require(try fx.json(try fx.run(["list", "--all", "--json", "--permission", "camera"]))["grants"]
            as? [[String: Any]])
        #expect(all.count == 1)
        #expect(all.first?["active"] as? Bool == false)
        #expect(all.first?["ended"] is String && all.first?["expires"] is String)
        #expect(all.first?["scope"] as? String == "for", "the term as requests spell it (issue 26: `until` went)")
        #expect(all.first?["reason"] as? String == "exam")

        let table = try fx.run(["list", "--user", fx.alice.name])
        #expect(table.status == 0)
        #expect(table.stdout.contains("microphone") && table.stdout.contains("deny") && !table.stdout.contains("camera"))
    }

    /// `--device` takes a device node's path as well as the id (issue 31): the path's device
    /// number (st_rdev, through a symlink too) names the device among the permission's
    /// devices; a path that is no node of one of them is a usage error naming it.
    @Test func deviceTakesANodePathMatchedByItsDeviceNumber() throws {
        let fx = try AdminFixture("devpath")
        try fx.camera("video0")  // 1:3
        let video1 = fx.nodes.path + "/video1"
        try TestProcess.setup("mknod", ["-m", "0600", video1, "c", "1", "7"])
        try fx.declare(name: "video1", path: video1, minor: 7)
        let link = fx.nodes.path + "/usb-camera-video-index0"
        #expect(symlink(video1, link) == 0)
        for path in [video1, link] {
            let granted = try fx.run(["grant", "camera", "--user", fx.alice.name, "--device", path])
            #expect(granted.status == 0, "\(path): \(granted.stderr)")
        }
        let all = try #require(try fx.json(try fx.run(["list", "--all", "--json"]))["grants"] as? [[String: Any]])
        #expect(all.map { $0["device"] as? String } == ["camera:test-video1", "camera:test-video1"], "\(all)")
        let revoked = try fx.run(["revoke", "camera", "--user", fx.alice.name, "--device", video1])
        #expect(revoked.status == 0 && revoked.stdout.contains("revoked"), "\(revoked.stdout) \(revoked.stderr)")
        #expect((try fx.json(try fx.run(["list", "--json"]))["grants"] as? [Any])?.isEmpty == true)

        // Another node with no camera's number (1:5), a file that is no node, no file at all.
        let zero = fx.nodes.path + "/zero"
        try TestProcess.setup("mknod", ["-m", "0600", zero, "c", "1", "5"])
        for path in [zero, fx.devicesFile, fx.nodes.path + "/missing"] {
            let refused = try fx.run(["grant", "camera", "--user", fx.alice.name, "--device", path])
            #expect(refused.status == 64, "\(path): \(refused.stderr)")
            #expect(refused.stderr.contains("'\(path)'") && refused.stderr.contains("devaccess devices camera"),
                    "\(path): \(refused.stderr)")
        }
        #expect((try fx.json(try fx.run(["list", "--json"]))["grants"] as? [Any])?.isEmpty == true)
    }

    @Test func stateDirOptionWinsOverTheEnvironment() throws {
        let fx = try AdminFixture("statedir")
        try fx.camera("video0")
        let other = try TemporaryDirectory()
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--state-dir", other.path]).status == 0)
        #expect(FileManager.default.fileExists(atPath: other.path + "/ledger.db"))
        #expect(!FileManager.default.fileExists(atPath: fx.ledgerPath))
    }
}
