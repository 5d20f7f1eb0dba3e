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

    /// Finding 2: the socket judges a process holding the group id of an ended strict run
    /// (a descendant that outlived it) as that strict run, given nothing; the gpsd endpoint
    /// knew only live strict runs, so the same leftover connecting to 127.0.0.1 was served
    /// location at its user's level: a strict camera run read its user's position by leaving
    /// a process behind (`setsid`, its program exits, the run ends).
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func aLeftoverOfAnEndedStrictRunIsNotServedLocationAtTheGpsdEndpoint() throws {
        let setup = try RunLocationAttackTests.Setup()
        let user = try TestUser("h5gpsd")
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name] + setup.requests.socket).status == 0)
        let helpers = RunLocationAttackTests.helpers
        // The user at large is served (else this test would prove nothing).
        let outside = try user.python(helpers + """
            s = socket.create_connection(("127.0.0.1", port))
            print(json.dumps(watch(s, 1, 8)))
            """, [String(setup.port), setup.marks.path])
        #expect((try? json(outside.stdout))?["tpv"] as? Int ?? 0 > 0, "the user was not served: \(outside.stdout)")
        let leftover = helpers + """
            wait_for(marks + "/ended")
            s = socket.create_connection(("127.0.0.1", port))
            say(marks + "/leftover", watch(s, 1, 8))
            """
        let strict = try RunTests.run(user, setup.requests, [
            "--camera", "--strict", "--", "/bin/sh", "-c",
            "setsid \"$0\" -c \"$1\" \"$2\" \"$3\" </dev/null >/dev/null 2>&1 & exit 0",
            RunLocationAttackTests.python, leftover, String(setup.port), setup.marks.path,
        ])
        #expect(strict.status == 0, "\(strict.stderr)")
        let runs = try setup.requests.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.count == 1 && runs.allSatisfy { $0.strict && $0.ended != nil }, "\(runs)")
        setup.say("ended")
        let served = setup.report("leftover", within: 20)
        #expect(served != nil && served?["tpv"] as? Int == 0,
                "a leftover of an ended strict camera run was served location: \(served ?? [:])")
    }

    /// Finding 3: root and administrators are not held to per-user limits, and a strict run
    /// of an administrator's was not either: the program the administrator did not trust
    /// (why else --strict) took every one of devaccessd's connections, the slots kept for
    /// administrators included, and root's own `devaccess list` was turned away `busy`.
    @Test func aStrictRunOfAnAdministratorIsHeldToThePerUserConnectionLimit() throws {
        let carol = try TestUser("h5slots")
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", admins: [carol], daemonArguments: [
            "--max-connections", "40", "--max-connections-per-user", "10", "--reserved-connections", "10",
        ])
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let counts = marks.path + "/counts"
        let run = try RunTests.runInBackground(carol, setup, [
            "--camera", "--strict", "--", "/bin/sh", "-c", "/usr/bin/python3 -c \"$0\" \"$1\" 45 20 > \"$2\"",
            AbuseLimitTests.holdConnections, setup.daemon.socketPath, counts,
        ])
        defer { kill(run.process.processIdentifier, SIGTERM); _ = run.finish() }
        let written = LiveEnforcementTests.waitFor(30) {
            ((try? String(contentsOfFile: counts, encoding: .utf8)) ?? "").hasSuffix("\n")
        }
        try #require(written != nil, "the strict run never reported its connections")
        let held = (try? json((try? String(contentsOfFile: counts, encoding: .utf8)) ?? "")) ?? [:]
        #expect((held["served"] as? Int ?? 0) <= 10, "a strict run of an administrator held \(held) connections")
        let root = try TestProcess.devaccess(["list"] + setup.socket)
        #expect(root.status == 0, "root was turned away while an administrator's strict run held the slots: \(root.stderr)")
    }
}
