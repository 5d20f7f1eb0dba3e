import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// A broken policy never leaves the broker without one: refused at start, the last good
/// one kept while it runs (per request and on SIGHUP), and `devaccess policy check` says
/// where the error is before anyone restarts anything.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct PolicyLastGoodTests {
    @Test func anInvalidPolicyIsRefusedAtStartNamingFileAndLine() throws {
        let config = try TemporaryDirectory()
        try Data("[camera]\nDefault=maybe\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        let daemon = try RunningDaemon(arguments: ["--config-dir", config.path], waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 1, "\(daemon.log)")
        #expect(daemon.log.contains("refusing to start: the policy does not parse"), "\(daemon.log)")
        #expect(daemon.log.contains("devaccess.conf:2"), "\(daemon.log)")
    }

    @Test func aFileBrokenWhileRunningKeepsTheLastGoodPolicy() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let file = setup.config.path + "/devaccess.conf"
        let user = try TestUser("lastgood")
        try Data("[camera]\nDefault=maybe\n".utf8).write(to: URL(fileURLWithPath: file))
        let run = try user.withoutTerminal(["request", "camera", "--always"] + setup.socket)
        #expect(run.status == 0, "served with the last good policy: \(run.stdout) \(run.stderr)")
        #expect(try setup.grants(user).first?.method == .policy)
        #expect(setup.daemon.log.contains("the policy does not parse; the last policy that did stays in force"),
                "\(setup.daemon.log)")
        #expect(setup.daemon.log.contains("devaccess.conf:2"))

        // SIGHUP says the same, and that nothing was reloaded.
        kill(setup.daemon.pid, SIGHUP)
        let said = Date().addingTimeInterval(5)
        while Date() < said && !setup.daemon.log.contains("policy not reloaded") { usleep(20_000) }
        #expect(setup.daemon.log.contains("policy not reloaded: it does not parse; the last good policy stays in force"),
                "\(setup.daemon.log)")

        // Fixed: the new policy counts at once.
        try Data("[camera]\nDefault=deny\n".utf8).write(to: URL(fileURLWithPath: file))
        let other = try TestUser("lastgood2")
        let denied = try other.withoutTerminal(["request", "camera"] + setup.socket)
        #expect(denied.status == 5, "restricted by the fixed policy: \(denied.stdout) \(denied.stderr)")
        #expect(setup.daemon.log.contains("the policy parses again and is in force"), "\(setup.daemon.log)")
    }

    /// devaccessd's own status (a user's, which it answers) says the files are broken and the
    /// last good policy is enforced (issue 31: it said nothing, as if the files were fine).
    @Test func theBrokersStatusSaysTheFilesAreBrokenAndTheLastGoodPolicyIsEnforced() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=deny\n")
        let user = try TestUser("lastgoodst")
        try Data("[camera]\nDefault=maybe\n".utf8).write(to: URL(fileURLWithPath: setup.config.path + "/devaccess.conf"))
        let env = ["DEVACCESS_TEST_DEVICES": setup.devices, "DEVACCESS_SOCKET": setup.daemon.socketPath,
                   "DEVACCESS_STATE_DIR": setup.stateDirectory, "DEVACCESS_GPSD": "127.0.0.1:9"]
        let status = try user.devaccess(["status", "camera"], environment: env)
        #expect(status.stdout.contains("restricted"), "the last good policy: \(status.stdout) \(status.stderr)")
        #expect(status.stdout.contains("the policy files do not parse") && status.stdout.contains("devaccess.conf:2")
                && status.stdout.contains("devaccessd enforces the last policy that parsed"), "\(status.stdout)")
    }

    @Test func policyCheckNamesErrorsAndWarnsAboutNamesThatMatchNobody() throws {
        let config = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: true)
        try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        try Data("[Rule]\nPermission=camera\nUser=no-such-user-xyz\nProgram=/usr/bin/sleep\nAction=allow\n".utf8)
            .write(to: URL(fileURLWithPath: config.path + "/conf.d/50-lab.conf"))
        let valid = try TestProcess.devaccess(["policy", "check", config.path])
        #expect(valid.status == 0, "\(valid.stderr)")
        #expect(valid.stdout.contains("is valid: 1 rule(s)"), "\(valid.stdout)")
        #expect(valid.stderr.contains("50-lab.conf:1: User=no-such-user-xyz names no user"), "\(valid.stderr)")
        #expect(valid.stderr.contains("LD_PRELOAD"), "\(valid.stderr)")

        try Data("[Rule]\nPermission=camera\nAction=maybe\n".utf8)
            .write(to: URL(fileURLWithPath: config.path + "/conf.d/50-lab.conf"))
        let invalid = try TestProcess.devaccess(["policy", "check", config.path, "--json"])
        #expect(invalid.status == 1)
        let report = try json(invalid.stdout)
        #expect(report["valid"] as? Bool == false)
        #expect((report["error"] as? String)?.contains("50-lab.conf:3") == true, "\(invalid.stdout)")
        #expect(try TestProcess.devaccess(["policy", "lint"]).status == 64)
    }
}
