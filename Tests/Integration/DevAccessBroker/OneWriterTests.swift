import Foundation
import Glibc
import Synchronization
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// One interface, one writer: while devaccessd runs, every decision (root's included)
/// goes through it; admins act through it without root; users see and withdraw only
/// their own; `--offline` is root's repair mode for a stopped daemon, under the lock
/// the daemon holds.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups, nodes and ACLs"))
struct OneWriterTests {
    /// The user's ACL entry on `node`, the ledger's records of it and its standing allow
    /// grants must tell the same story: no entry without a record, no record without an
    /// entry, and a record only while an allow grant stands.
    static func consistency(_ setup: RequestSetup, node: String, user: TestUser) throws -> String? {
        let ledger = try setup.ledger()
        let records = try ledger.aclEntries(nodePath: node).filter { $0.qualifier == .user(user.uid) }
        let standing = try ledger.grants(uid: user.uid).filter { $0.decision == .allow && $0.permission == .camera }
        let entry = ACLProbe.hasUserEntry(node, uid: user.uid)
        if entry && records.isEmpty { return "entry user:\(user.uid) on \(node) without a record" }
        if !entry && !records.isEmpty { return "record \(records.map(\.id)) without an entry on \(node)" }
        if !records.isEmpty && standing.isEmpty { return "record \(records.map(\.id)) with no standing grant" }
        if records.isEmpty && !standing.isEmpty { return "standing grant \(standing.map(\.id)) with no entry" }
        return nil
    }

    /// The race of the two-writer days: a user granting themselves through the broker in
    /// a loop (policy allow) while an admin revokes in a loop. With one writer, every
    /// moment between commands is consistent, and so is the end.
    @Test func requestAndRevokeLoopsLeaveNodesGrantsAndRecordsConsistent() async throws {
        // The user's loop is hundreds of decisions a minute: lift the per-user change limit,
        // which is not what this test is about (AbuseLimitTests checks it).
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n",
                                     daemonArguments: ["--max-changes-per-user", "1000000"])
        let user = try TestUser("race")
        let socket = setup.socket
        let env = ["DEVACCESS_SOCKET": setup.daemon.socketPath]
        let seconds = Double(ProcessInfo.processInfo.environment["DEVACCESS_RACE_SECONDS"] ?? "") ?? 30
        // 30 s of racing, and on a loaded machine longer (up to 3 minutes) until each side
        // has run at least 20 times: the loops must really overlap.
        let deadline = Date().addingTimeInterval(seconds)
        let limit = Date().addingTimeInterval(max(seconds, 180))
        let rounds = RoundCounter()
        let minimum = 20
        @Sendable func goOn(_ mine: Int) -> Bool {
            let now = Date()
            if now >= limit { return false }
            return now < deadline || mine < minimum || rounds.value.load(ordering: .relaxed) < 2 * minimum
        }
        async let requests: (Int, [String]) = Task.detached {
            var count = 0
            var failures: [String] = []
            while goOn(count) {
                let run = try user.withoutTerminal(["request", "camera", "--always"] + socket)
                // Exit 4 (notDetermined) with a grant reported (made now, or standing when the
                // request came): the admin's revoke ran between that and the status the
                // request reports, which is the truth.
                let said = run.stdout + run.stderr
                let revokedMeanwhile = run.status == 4
                    && (said.contains("allowed until revoked") || said.contains("already allowed by grant"))
                if run.status != 0 && !revokedMeanwhile { failures.append("request exit \(run.status): \(run.stderr)") }
                count += 1
                rounds.value.add(1, ordering: .relaxed)
            }
            return (count, failures)
        }.value
        async let revokes: (Int, [String]) = Task.detached {
            var count = 0
            var failures: [String] = []
            while goOn(count) {
                let run = try TestProcess.devaccess(["revoke", "camera", "--user", user.name], environment: env)
                if run.status != 0 { failures.append("revoke exit \(run.status): \(run.stderr)") }
                count += 1
                rounds.value.add(1, ordering: .relaxed)
            }
            return (count, failures)
        }.value
        let (requested, requestFailures) = try await requests
        let (revoked, revokeFailures) = try await revokes
        #expect(requested >= minimum && revoked >= minimum,
                "too few rounds to race: \(requested) requests, \(revoked) revokes")
        #expect(requestFailures.isEmpty, "\(requestFailures.prefix(3))")
        #expect(revokeFailures.isEmpty, "\(revokeFailures.prefix(3))")
        // Both loops have returned, so the broker has finished every operation they asked for.
        let problem = try Self.consistency(setup, node: setup.camera, user: user)
        #expect(problem == nil, "\(problem ?? "")")
        let verify = try TestProcess.devaccess(["audit", "--verify"], environment: env)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stdout.contains("audit chain intact"))
        // And the engine's own view agrees: nothing to change, no drift.
        let reconcile = try TestProcess.devaccess(["reconcile", "--json"], environment: env)
        #expect(reconcile.status == 0, "\(reconcile.stderr)")
        let report = try json(reconcile.stdout)
        #expect((report["changes"] as? [Any])?.isEmpty == true, "\(reconcile.stdout)")
        #expect((report["drift"] as? [Any])?.isEmpty == true, "\(reconcile.stdout)")
    }

    /// A member of the admin group, not root, does every admin operation through the
    /// broker; a plain user is refused each one on another user's decisions (exit 77,
    /// audited), lists only their own and withdraws only their own pending request.
    @Test func adminMembersActThroughTheBrokerAndUsersOnlyOnTheirOwn() throws {
        let carol = try TestUser("wadmin")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let erin = try TestUser("wuser")
        let mallory = try TestUser("wnosy")
        let socket = ["--socket", setup.daemon.socketPath]

        // carol (admin group, not root) grants, lists, revokes, resets, verifies.
        let granted = try carol.devaccess(["grant", "camera", "--user", erin.name, "--for", "1h", "--json"] + socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        let decision = try json(granted.stdout)
        #expect((decision["grant"] as? [String: Any])?["decidedBy"] as? String == carol.name)
        #expect(try erin.canOpen(setup.camera, .readWrite))
        let listed = try carol.devaccess(["list", "--json"] + socket)
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("\"user\" : \"\(erin.name)\""))
        #expect(try carol.devaccess(["audit", "--verify"] + socket).status == 0)
        #expect(try carol.devaccess(["reconcile"] + socket).status == 0)

        // mallory: refused for erin's decisions, every one audited; and her own reset is
        // refused while an administrator's denial of hers stands (a user forgets only what
        // they answered at a prompt).
        #expect(try carol.devaccess(["deny", "microphone", "--user", mallory.name] + socket).status == 0)
        let refusedBefore = try setup.ledger().events().map(\.event).filter { $0.type == .refused }.count
        let attempts: [[String]] = [
            ["grant", "camera", "--user", erin.name],
            ["grant", "camera", "--user", mallory.name],
            ["deny", "camera", "--user", erin.name],
            ["revoke", "camera", "--user", erin.name],
            ["reset", "--user", erin.name],
            ["reset", "--user", mallory.name],
            ["reset", "microphone"],
            ["list", "--user", erin.name],
            ["reconcile"],
            ["audit", "--verify"],
        ]
        for attempt in attempts {
            let run = try mallory.devaccess(attempt + socket)
            #expect(run.status == 77, "\(attempt): exit \(run.status) \(run.stderr)")
            #expect(run.stderr.contains("may not"), "\(attempt): \(run.stderr)")
        }
        let refusals = try setup.ledger().events().map(\.event).filter { $0.type == .refused }
        #expect(refusals.count - refusedBefore == attempts.count)
        #expect(refusals.suffix(attempts.count).allSatisfy { $0.actor?.uid == mallory.uid })
        #expect(try erin.canOpen(setup.camera, .readWrite), "a refused revoke changed nothing")

        // mallory's own list is her own (the denial carol recorded, which her reset left
        // alone); erin's has her grant and nothing of anyone else.
        let own = try mallory.devaccess(["list", "--json"] + socket)
        #expect(own.status == 0, "\(own.stderr)")
        let owned = try json(own.stdout)["grants"] as? [[String: Any]] ?? []
        #expect(owned.count == 1 && owned.first?["uid"] as? Int == Int(mallory.uid)
                    && owned.first?["decision"] as? String == "deny" && owned.first?["how"] as? String == "admin",
                "\(own.stdout)")
        let erins = try erin.devaccess(["list", "--json"] + socket)
        let erinGrants = try json(erins.stdout)["grants"] as? [[String: Any]] ?? []
        #expect(erinGrants.count == 1 && erinGrants.allSatisfy { $0["uid"] as? Int == Int(erin.uid) }, "\(erins.stdout)")

        // Pending: each user sees and withdraws their own only.
        let erinAsks = try erin.withoutTerminal(["request", "microphone"] + socket)
        #expect(erinAsks.status == 4, "\(erinAsks.stdout) \(erinAsks.stderr)")
        let malloryAsks = try mallory.withoutTerminal(["request", "camera", "--always"] + socket)
        #expect(malloryAsks.status == 4, "\(malloryAsks.stdout) \(malloryAsks.stderr)")
        let waiting = try setup.ledger().pendingRequests()
        guard let erinsRequest = waiting.first(where: { $0.subject.uid == erin.uid }),
              let mallorysRequest = waiting.first(where: { $0.subject.uid == mallory.uid }) else {
            Issue.record("both requests should wait: \(waiting)")
            return
        }
        let malloryPending = try mallory.devaccess(["pending", "--json"] + socket)
        #expect(malloryPending.status == 0, "\(malloryPending.stderr)")
        let shown = try json(malloryPending.stdout)["requests"] as? [[String: Any]] ?? []
        #expect(shown.map { $0["id"] as? Int } == [Int(mallorysRequest.id)], "\(malloryPending.stdout)")
        let stolen = try mallory.devaccess(["withdraw", String(erinsRequest.id)] + socket)
        #expect(stolen.status == 1, "\(stolen.stderr)")
        #expect(try setup.ledger().pendingRequest(id: erinsRequest.id)?.isWaiting == true)
        let withdrawn = try mallory.devaccess(["withdraw", String(mallorysRequest.id)] + socket)
        #expect(withdrawn.status == 0, "\(withdrawn.stderr)")
        #expect(try setup.ledger().pendingRequest(id: mallorysRequest.id)?.resolution == .withdrawn)
        let adminPending = try carol.devaccess(["pending", "--json"] + socket)
        #expect((try json(adminPending.stdout)["requests"] as? [Any])?.count == 1, "\(adminPending.stdout)")

        // carol ends it all for erin: revoke, then reset.
        #expect(try carol.devaccess(["revoke", "camera", "--user", erin.name] + socket).status == 0)
        #expect(try !erin.canOpen(setup.camera, .read))
        #expect(try carol.devaccess(["reset", "--user", erin.name] + socket).status == 0)
        #expect(try setup.grants(erin).isEmpty)
    }

    /// A user may give up their own grant (it only takes access away).
    @Test func aUserRevokesTheirOwnGrant() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("wself")
        let socket = ["--socket", setup.daemon.socketPath]
        #expect(try user.withoutTerminal(["request", "camera", "--always"] + socket).status == 0)
        #expect(try user.canOpen(setup.camera, .read))
        let revoked = try user.devaccess(["revoke", "camera", "--user", user.name] + socket)
        #expect(revoked.status == 0, "\(revoked.stderr)")
        #expect(try !user.canOpen(setup.camera, .read))
    }

    /// `--offline` is for a stopped daemon: refused while one answers or holds the lock,
    /// done here when it is down, and a daemon started afterwards converges on it.
    @Test func offlineRefusesWhileTheDaemonRunsAndWorksWhenItIsDown() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("woff")
        let env = ["DEVACCESS_TEST_DEVICES": setup.devices, "DEVACCESS_SOCKET": setup.daemon.socketPath]
        let state = setup.stateDirectory

        // The daemon answers on the socket: refused, nothing written.
        let refused = try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--offline",
                                                 "--state-dir", state], environment: env)
        #expect(refused.status == 75, "\(refused.stderr)")
        #expect(refused.stderr.contains("without --offline"))
        // Another socket path, same state directory: the engine lock still refuses it.
        let locked = try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--offline",
                                                "--state-dir", state, "--socket", state + "/nobody.sock"],
                                               environment: env)
        #expect(locked.status == 75, "\(locked.stderr)")
        #expect(locked.stderr.contains("engine lock"))
        #expect(try setup.grants(user).isEmpty)
        #expect(try !user.canOpen(setup.camera, .read))

        // Not root: refused before anything is opened.
        let notRoot = try user.devaccess(["reconcile", "--offline", "--state-dir", state], environment: env)
        #expect(notRoot.status == 77, "\(notRoot.stderr)")

        // Without --offline and without a daemon: 69, and the message names --offline.
        try setup.stop()
        let noDaemon = try TestProcess.devaccess(["grant", "camera", "--user", user.name], environment: env)
        #expect(noDaemon.status == 69, "\(noDaemon.stderr)")
        #expect(noDaemon.stderr.contains("--offline"))

        // Daemon down: --offline works, for 2 seconds.
        let offline = try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--for", "2s", "--offline",
                                                 "--state-dir", state], environment: env)
        #expect(offline.status == 0, "\(offline.stderr)")
        #expect(try user.canOpen(setup.camera, .read))
        // The grant ends while nothing runs; the daemon started afterwards removes the entry.
        usleep(2_500_000)
        #expect(try user.canOpen(setup.camera, .read), "nothing has run since the grant expired")
        try setup.start()
        #expect(try !user.canOpen(setup.camera, .read))
        #expect(try setup.grants(user).allSatisfy { !$0.isActive(at: Date()) })
    }

    /// Two writers racing at start: an `--offline` run (here a holder of its lock) that is
    /// still at work when devaccessd starts. The daemon waits for it rather than write
    /// beside it, and gives up (exit 1, saying why) if it does not end.
    @Test func theDaemonWaitsForAnOfflineRunAndRefusesToStartBesideIt() throws {
        let scratch = try TemporaryDirectory()
        let state = scratch.path + "/state"
        #expect(mkdir(state, 0o700) == 0)
        func holdLock(seconds: Int) throws -> Process {
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            holder.arguments = ["-c", "import fcntl, os, sys, time\n"
                + "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
                + "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(float(sys.argv[2]))",
                                state + "/engine.lock", String(seconds)]
            let out = Pipe()
            holder.standardOutput = out
            try holder.run()
            _ = out.fileHandleForReading.availableData  // "locked": the lock is held from here on
            return holder
        }

        let briefly = try holdLock(seconds: 3)
        let waiting = try RunningDaemon(arguments: ["--state-dir", state], waitForReady: false)
        usleep(1_500_000)
        #expect(briefly.isRunning)
        #expect((try? waiting.client(timeout: .seconds(1)).hello()) == nil, "serving beside the offline run")
        #expect(!FileManager.default.fileExists(atPath: state + "/ledger.db"), "the ledger was opened beside it")
        briefly.waitUntilExit()
        try waiting.waitUntilServing(timeout: 15)
        #expect(waiting.stop() == 0)

        let stuck = try holdLock(seconds: 30)
        defer { stuck.terminate(); stuck.waitUntilExit() }
        let refused = try RunningDaemon(arguments: ["--state-dir", state], waitForReady: false)
        #expect(refused.waitForExit(timeout: 20) == 1, "\(refused.log)")
        #expect(refused.log.contains("engine lock"), "\(refused.log)")
    }

    /// Unprivileged status: the ledger part comes from devaccessd, or is said to be unknown.
    @Test func unprivilegedStatusAsksTheBrokerOrSaysDecisionsAreUnknown() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("wstat")
        let other = try TestUser("wstat2")
        let env = ["DEVACCESS_TEST_DEVICES": setup.devices, "DEVACCESS_SOCKET": setup.daemon.socketPath,
                   "DEVACCESS_STATE_DIR": setup.stateDirectory, "DEVACCESS_GPSD": "127.0.0.1:9"]
        #expect(try TestProcess.devaccess(["deny", "camera", "--user", user.name], environment: env).status == 0)

        let fromBroker = try user.devaccess(["status", "camera", "--json"], environment: env)
        #expect(fromBroker.status == 0, "\(fromBroker.stderr)")
        #expect(fromBroker.stdout.contains("\"status\": \"denied\""), "\(fromBroker.stdout)")

        // Another user's status: refused locally as the broker refuses it.
        let nosy = try other.devaccess(["status", "camera", "--user", user.name], environment: env)
        #expect(nosy.status == 77, "\(nosy.stderr)")

        try setup.stop()
        let unknown = try user.devaccess(["status", "camera", "--json"], environment: env)
        #expect(unknown.status == 0, "\(unknown.stderr)")
        #expect(unknown.stdout.contains("decisions unknown: devaccessd not reachable"), "\(unknown.stdout)")
        #expect(!unknown.stdout.contains("\"status\": \"denied\""))
        // Root still reads the ledger itself (read-only), daemon or not.
        let root = try TestProcess.devaccess(["status", "camera", "--user", user.name, "--json"], environment: env)
        #expect(root.stdout.contains("\"status\": \"denied\""), "\(root.stdout)")
    }

    /// A state directory another user owns (a world-writable --state-dir) or a symlink is
    /// refused before any ledger in it is trusted or any lock taken.
    @Test func aStateDirectoryNotOwnedByRootIsRefused() throws {
        let owner = try TestUser("wdir")
        let scratch = try TemporaryDirectory()
        let planted = scratch.path + "/planted"
        #expect(mkdir(planted, 0o777) == 0)
        #expect(chown(planted, owner.uid, owner.gid) == 0)
        let env = ["DEVACCESS_SOCKET": scratch.path + "/no-daemon.sock", "DEVACCESS_GPSD": "127.0.0.1:9"]
        let offline = try TestProcess.devaccess(["reconcile", "--offline", "--state-dir", planted], environment: env)
        #expect(offline.status == 74, "\(offline.stderr)")
        #expect(offline.stderr.contains("belongs to uid \(owner.uid)"), "\(offline.stderr)")
        #expect(!FileManager.default.fileExists(atPath: planted + "/ledger.db"))
        let link = scratch.path + "/link"
        #expect(symlink(scratch.path, link) == 0)
        let linked = try TestProcess.devaccess(["reconcile", "--offline", "--state-dir", link], environment: env)
        #expect(linked.status == 74, "\(linked.stderr)")
        #expect(linked.stderr.contains("not a directory"), "\(linked.stderr)")
        let daemon = try RunningDaemon(arguments: ["--state-dir", planted], waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 1, "\(daemon.log)")
        #expect(daemon.log.contains("belongs to uid \(owner.uid)"), "\(daemon.log)")
    }
}

/// Rounds both loops of the race have run, shared between their tasks.
final class RoundCounter: Sendable {
    let value = Atomic<Int>(0)
}
