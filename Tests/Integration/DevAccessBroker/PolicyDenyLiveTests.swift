import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// A policy changed on disk is applied by the running daemon without SIGHUP or any
/// command: inotify on the configuration directory reloads it and a reconcile ends the
/// grants it forbids. A drop-in that does not parse keeps the last good policy, and the
/// log names file:line. Real daemon, real user, real node, real opens.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct PolicyDenyLiveTests {
    static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    @Test func aDropInThatDeniesTheUserEndsTheirGrantWithinSecondsWithoutSIGHUP() throws {
        let setup = try LiveEnforcementTests.Setup("livepolicy")
        let config = try TemporaryDirectory()
        try Self.write("[camera]\nDefault=ask\n", to: config.path + "/devaccess.conf")
        let daemon = try setup.daemon(["--config-dir", config.path, "--reconcile-interval", "0"])
        try setup.grant(through: daemon)
        #expect(setup.hasEntry)
        #expect(try setup.user.canOpen(setup.node, .readWrite))

        // conf.d does not exist yet: root makes it and writes the drop-in, as a package would.
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: false)
        let written = Date()
        try Self.write("[Rule]\nPermission=camera\nUser=\(setup.user.name)\nAction=deny\n",
                       to: config.path + "/conf.d/50-deny.conf")
        let removed = try #require(LiveEnforcementTests.waitFor(5) { !setup.hasEntry },
                                   "the entry stayed under the policy deny: \(daemon.log)")
        print("policy drop-in written -> ACL entry removed: \(Int(removed.timeIntervalSince(written) * 1000)) ms")
        #expect(try !setup.user.canOpen(setup.node, .read))
        // The run logs once it is done, just after the edit.
        let logged = LiveEnforcementTests.waitFor(5) { daemon.log.contains("msg=\"grant ended by policy\" grant=1") }
        #expect(logged != nil, "\(daemon.log)")
        #expect(daemon.log.contains("50-deny.conf:1"), "\(daemon.log)")
        #expect(daemon.log.contains("trigger=inotify"), "\(daemon.log)")

        // The ledger records it as ended by policy; the daemon applies it to a new grant too.
        let list = try setup.cli(["list", "--all", "--json"], through: daemon)
        #expect(list.status == 0, "\(list.stderr)")
        let grants = try json(list.stdout)["grants"] as? [[String: Any]] ?? []
        #expect(grants.first?["active"] as? Bool == false, "\(list.stdout)")
        let refused = try setup.cli(["grant", "camera", "--user", setup.user.name], through: daemon)
        #expect(refused.status == 77, "\(refused.stdout) \(refused.stderr)")
        #expect(daemon.stop() == 0)
        let events = try TestProcess.run("/usr/bin/sqlite3", [
            daemon.stateDirectory + "/ledger.db", "SELECT type, details FROM audit_events WHERE type = 'revoke'",
        ]).stdout
        #expect(events.contains("\"ended_by\":\"policy\""), "\(events)")
    }

    /// Locks every lock it may take on argv[1..] (flock exclusive, a POSIX read lock on the
    /// whole file) and holds them; prints once they are held.
    static let lockFiles = """
        import fcntl, json, os, sys, time
        held = []
        for path in sys.argv[1:]:
            fd = os.open(path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0, os.SEEK_SET)
            held.append(fd)
        print(json.dumps({"locked": len(held)}), flush=True)
        time.sleep(600)
        """

    /// The policy files are the only files of devaccessd's a user can read: a user holding
    /// every lock they can take on them (the one who would lose access, say) delays no
    /// reload and no ending.
    @Test func aUserLockingThePolicyFilesDelaysNoPolicyDeny() throws {
        let setup = try LiveEnforcementTests.Setup("livelock")
        let config = try TemporaryDirectory()
        #expect(chmod(config.path, 0o755) == 0)
        let main = config.path + "/devaccess.conf"
        try Self.write("[camera]\nDefault=ask\n", to: main)
        #expect(chmod(main, 0o644) == 0)
        let daemon = try setup.daemon(["--config-dir", config.path, "--reconcile-interval", "0"])
        try setup.grant(through: daemon)
        #expect(setup.hasEntry)
        let holder = try setup.user.background(Self.lockFiles, [main])
        defer { holder.stop() }
        #expect(holder.report["locked"] as? Int == 1)

        try Self.write("[camera]\nDefault=ask\n[Rule]\nPermission=camera\nUser=\(setup.user.name)\nAction=deny\n", to: main)
        #expect(LiveEnforcementTests.waitFor(5) { !setup.hasEntry } != nil,
                "a user's locks on the policy file kept the entry: \(daemon.log)")
        #expect(try !setup.user.canOpen(setup.node, .read))
        #expect(daemon.stop() == 0)
    }

    /// Fail closed: when the ledger cannot be written (its WAL immutable, as a full disk
    /// would leave it), a policy deny still removes the entry; the ending is recorded once
    /// the ledger can be written again.
    @Test func aPolicyDenyRemovesTheEntryEvenWhenTheLedgerCannotBeWritten() throws {
        let setup = try LiveEnforcementTests.Setup("livepolfull")
        let config = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: false)
        try Self.write("[camera]\nDefault=ask\n", to: config.path + "/devaccess.conf")
        let daemon = try setup.daemon(["--config-dir", config.path])
        try setup.grant(through: daemon)
        #expect(setup.hasEntry)
        let wal = daemon.stateDirectory + "/ledger.db-wal"
        #expect(try TestProcess.run("/usr/bin/chattr", ["+i", wal]).status == 0)
        defer { _ = try? TestProcess.run("/usr/bin/chattr", ["-i", wal]) }

        try Self.write("[Rule]\nPermission=camera\nUser=\(setup.user.name)\nAction=deny\n",
                       to: config.path + "/conf.d/50-deny.conf")
        #expect(LiveEnforcementTests.waitFor(5) { !setup.hasEntry } != nil, "the entry stayed: \(daemon.log)")
        #expect(try !setup.user.canOpen(setup.node, .read))
        let standing = "SELECT count(*) FROM grants WHERE revoked_usec IS NULL"
        let before = try TestProcess.run("/usr/bin/sqlite3", [daemon.stateDirectory + "/ledger.db", standing])
        #expect(before.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "not recorded yet: \(before.stdout)")

        #expect(try TestProcess.run("/usr/bin/chattr", ["-i", wal]).status == 0)
        let recorded = LiveEnforcementTests.waitFor(10) {
            let open = try? TestProcess.run("/usr/bin/sqlite3", [daemon.stateDirectory + "/ledger.db", standing])
            return open?.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0"
        }
        #expect(recorded != nil, "the retry did not record the ending: \(daemon.log)")
        #expect(!setup.hasEntry)
        #expect(daemon.stop() == 0)
        #expect(try setup.offline(["audit", "--verify"], stateDirectory: daemon.stateDirectory).status == 0)
    }

    @Test func offlineReconcileWithTheDaemonDownEndsTheGrantToo() throws {
        let setup = try LiveEnforcementTests.Setup("offpolicy")
        let config = try TemporaryDirectory()
        try Self.write("[camera]\nDefault=ask\n", to: config.path + "/devaccess.conf")
        let daemon = try setup.daemon(["--config-dir", config.path])
        try setup.grant(through: daemon)
        #expect(daemon.stop() == 0)
        #expect(try setup.user.canOpen(setup.node, .readWrite))

        try Self.write("[camera]\nDefault=ask\n[Rule]\nPermission=camera\nUser=\(setup.user.name)\nAction=deny\n",
                       to: config.path + "/devaccess.conf")
        let reconcile = try TestProcess.devaccess(
            ["reconcile", "--offline", "--state-dir", daemon.stateDirectory], environment: [
                "DEVACCESS_TEST_DEVICES": setup.devices, "DEVACCESS_SOCKET": daemon.stateDirectory + "/no-daemon.sock",
                "DEVACCESS_GPSD": "127.0.0.1:9", "DEVACCESS_CONFIG_DIR": config.path,
            ])
        #expect(reconcile.status == 0, "\(reconcile.stderr)")
        #expect(reconcile.stdout.contains("ended grant 1 by policy: policy forbids camera for \(setup.user.name)"),
                "\(reconcile.stdout)")
        #expect(reconcile.stdout.contains("devaccess.conf:3"), "\(reconcile.stdout)")
        #expect(!setup.hasEntry)
        #expect(try !setup.user.canOpen(setup.node, .read))
    }

    @Test func aBrokenDropInWhileRunningKeepsTheLastGoodPolicyAndTheLogSaysWhere() throws {
        let setup = try LiveEnforcementTests.Setup("livebroken")
        let config = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: false)
        try Self.write("[camera]\nDefault=ask\n", to: config.path + "/devaccess.conf")
        let daemon = try setup.daemon(["--config-dir", config.path])
        try setup.grant(through: daemon)

        try Self.write("[Rule]\nPermission=camera\nAction=maybe\n", to: config.path + "/conf.d/60-broken.conf")
        let said = LiveEnforcementTests.waitFor(5) { daemon.log.contains("policy not reloaded: it does not parse") }
        #expect(said != nil, "\(daemon.log)")
        #expect(daemon.log.contains("60-broken.conf:3"), "\(daemon.log)")
        // The last good policy (ask) stays: the grant and its entry stand.
        #expect(setup.hasEntry)
        #expect(try setup.user.canOpen(setup.node, .readWrite))

        // Fixed to a deny: applied at once.
        try Self.write("[Rule]\nPermission=camera\nAction=deny\n", to: config.path + "/conf.d/60-broken.conf")
        #expect(LiveEnforcementTests.waitFor(5) { !setup.hasEntry } != nil, "\(daemon.log)")
        #expect(daemon.log.contains("the policy parses again and is in force"), "\(daemon.log)")
        #expect(try !setup.user.canOpen(setup.node, .read))
    }
}
