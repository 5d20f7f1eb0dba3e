import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// The fifth hostile review (2026-12-07), after the judge moved into DevAccessEngine: an
/// unprivileged local user, a process of a strict run, a subordinate uid and an
/// ex-administrator against `Caller` and `Authorization`.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct HostileReview5Tests {
    /// Finding 1: a strict run "acts for itself only", yet its program could end its user's
    /// grants (`revoke`), end its user's other runs with them (`revoke --terminate`) and forget
    /// its user's decisions (`reset`): the engine let anyone act on their own uid, and a strict
    /// run's uid is its user's. devaccessd is no way around the run's confinement, for the
    /// user's standing decisions either.
    @Test func aStrictRunCannotEndItsUsersGrantsNorItsUsersOtherRuns() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("h5revoke")
        let granted = try TestProcess.devaccess(["grant", "camera", "--user", user.name] + setup.socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let ready = marks.path + "/ready"
        // The user's plain camera run (a video call, say), which the strict run should not reach.
        let call = try RunTests.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c",
                                                              ": > \"$1\"; exec sleep 30", "sh", ready])
        defer { kill(call.process.processIdentifier, SIGTERM); _ = call.finish() }
        try #require(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: ready) } != nil,
                     "the user's camera run did not start")

        let cli = [TestProcess.devaccessBinary]
        let socket = ["--socket", setup.daemon.socketPath]
        let revoke = try RunTests.run(user, setup, ["--microphone", "--strict", "--"] + cli
            + ["revoke", "camera", "--user", user.name, "--terminate"] + socket)
        #expect(revoke.status != 0 && revoke.stderr.contains("strict"),
                "a strict microphone run revoked its user's camera: \(revoke.stderr)")
        let standing = try setup.grants(user).filter { $0.permission == .camera && $0.revoked == nil }
        #expect(!standing.isEmpty, "the user's camera grant was ended from a strict run")
        #expect(call.process.isRunning, "the user's camera run was ended from a strict run")

        let reset = try RunTests.run(user, setup, ["--microphone", "--strict", "--"] + cli
            + ["reset", "--user", user.name] + socket)
        #expect(reset.status != 0 && reset.stderr.contains("strict"),
                "a strict run reset its user's decisions: \(reset.stderr)")
    }
}
