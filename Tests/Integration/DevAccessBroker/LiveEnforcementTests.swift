import Foundation
import Glibc
import Synchronization
import Testing
import DevAccessBroker
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// Live enforcement in the real daemon (devaccessd(8), LIVE ENFORCEMENT): the start-up
/// reconcile, the expiry timer, re-created nodes and the periodic safety run, against
/// real nodes (mknod 1:3), real test users and real opens. Grants come from the real
/// root CLI through the daemon, as an admin makes them; after that no CLI command runs,
/// so whatever changes on the node is the daemon's doing.
///
/// The nodes have no udev events (udev does not know mknod'd nodes, and this machine
/// has no udevd); the daemon watches the declared nodes' directory instead (DEBUG only).
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct LiveEnforcementTests {
    /// A camera node only root can open, declared to the daemon and the CLI, and a user.
    final class Setup: @unchecked Sendable {
        let nodes: TemporaryDirectory
        let node: String
        let devices: String
        let user: TestUser

        init(_ tag: String) throws {
            nodes = try TemporaryDirectory()
            node = try nodes.makeNullNode("video0", mode: "0600")
            devices = try declareDevices([[
                "permission": "camera", "id": "camera:test-live", "name": "Live test camera",
                "nodes": [["path": node, "major": 1, "minor": 3]],
            ]], in: nodes)
            user = try TestUser(tag)
        }

        func daemon(_ arguments: [String] = [], environment: [String: String] = [:],
                    waitForReady: Bool = true) throws -> RunningDaemon {
            try RunningDaemon(arguments: arguments,
                              environment: ["DEVACCESS_TEST_DEVICES": devices].merging(environment) { _, new in new },
                              waitForReady: waitForReady)
        }

        /// Root's CLI through `daemon`, the one writer while it runs.
        func cli(_ arguments: [String], through daemon: RunningDaemon) throws -> ProcessOutput {
            try TestProcess.devaccess(arguments, environment: [
                "DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_SOCKET": daemon.socketPath,
                "DEVACCESS_GPSD": "127.0.0.1:9",
            ])
        }

        /// Root's CLI once the daemon has stopped: `--offline` on its state directory.
        func offline(_ arguments: [String], stateDirectory: String) throws -> ProcessOutput {
            try TestProcess.devaccess(arguments + ["--offline", "--state-dir", stateDirectory], environment: [
                "DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_SOCKET": stateDirectory + "/no-daemon.sock",
                "DEVACCESS_GPSD": "127.0.0.1:9",
            ])
        }

        func grant(_ extra: [String] = [], through daemon: RunningDaemon) throws {
            let result = try cli(["grant", "camera", "--user", user.name] + extra, through: daemon)
            guard result.status == 0 else { throw SetupError("grant failed: \(result.stderr)") }
        }

        var hasEntry: Bool { ACLProbe.hasUserEntry(node, uid: user.uid) }

        /// Removes the node and makes it again, as a replug does (a new inode, no ACL).
        func recreateNode() throws {
            guard unlink(node) == 0 else { throw SetupError("unlink \(node): \(String(cString: strerror(errno)))") }
            _ = try nodes.makeNullNode("video0", mode: "0600")
        }
    }

    /// The latest expiry of any grant, read from the ledger file (not through devaccess).
    static func newestExpiry(_ stateDirectory: String) throws -> Date {
        let output = try TestProcess.run("/usr/bin/sqlite3", [
            stateDirectory + "/ledger.db", "SELECT MAX(expires_usec) FROM grants",
        ])
        guard let micro = Double(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw SetupError("no expiry in the ledger: \(output.stdout) \(output.stderr)")
        }
        return Date(timeIntervalSince1970: micro / 1_000_000)
    }

    /// Polls `condition` every 5 ms until it holds; the time it first held, or nil.
    static func waitFor(_ timeout: Double, _ condition: () -> Bool) -> Date? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return Date() }
            usleep(5_000)
        }
        return condition() ? Date() : nil
    }

    // MARK: - Expiry

    @Test func anExpiryWhileRunningRemovesTheEntryOnTimeWithoutAnyCommand() throws {
        let setup = try Setup("liveexp")
        let daemon = try setup.daemon()
        try setup.grant(["--for", "2s"], through: daemon)
        #expect(setup.hasEntry)
        #expect(try setup.user.canOpen(setup.node, .readWrite))
        let expiry = try Self.newestExpiry(daemon.stateDirectory)

        // Never early; how late is a benchmark's figure (devaccess-bench), not a timed
        // assertion: that the expiry timer removed it, not a later periodic run, is in the log.
        let removed = try #require(Self.waitFor(30) { !setup.hasEntry }, "the entry stayed: \(daemon.log)")
        let late = removed.timeIntervalSince(expiry)
        #expect(late >= 0, "removed \(-late) s before the grant expired")
        #expect(try !setup.user.canOpen(setup.node, .read))
        // The run logs after its edits: the entry can be gone a moment before the line is written.
        #expect(Self.waitFor(10) { daemon.log.contains("msg=\"enforcement run\" trigger=expiry expired=1 changes=1") } != nil,
                "\(daemon.log)")
        #expect(daemon.log.contains("msg=\"grant expired\" grant=1"))
        #expect(daemon.stop() == 0)
        // The daemon ended it in the ledger too (an `expiry` event), and the chain holds.
        let events = try TestProcess.run("/usr/bin/sqlite3", [daemon.stateDirectory + "/ledger.db",
                                                              "SELECT type FROM audit_events ORDER BY seq"]).stdout
        #expect(events.split(separator: "\n") == ["grant", "acl_add", "expiry", "acl_remove"], "\(events)")
        #expect(try setup.offline(["audit", "--verify"], stateDirectory: daemon.stateDirectory).status == 0)
    }

    /// Fail closed: when the ledger cannot be written (here its WAL made immutable, as a
    /// full disk or an I/O error would), an expired grant still loses its entry on time;
    /// the expiry is recorded once the ledger can be written again.
    @Test func anExpiryRemovesTheEntryEvenWhenTheLedgerCannotBeWritten() throws {
        let setup = try Setup("livefull")
        let daemon = try setup.daemon()
        try setup.grant(["--for", "2s"], through: daemon)
        #expect(setup.hasEntry)
        let wal = daemon.stateDirectory + "/ledger.db-wal"
        #expect(try TestProcess.run("/usr/bin/chattr", ["+i", wal]).status == 0)
        defer { _ = try? TestProcess.run("/usr/bin/chattr", ["-i", wal]) }
        let expiry = try Self.newestExpiry(daemon.stateDirectory)
        // Removed while the ledger still cannot be written (the WAL stays immutable until this
        // test ends): the entry did not wait for the ledger. How late is a benchmark's figure.
        let removed = try #require(Self.waitFor(expiry.timeIntervalSinceNow + 30) { !setup.hasEntry },
                                   "the entry outlived its grant: \(daemon.log)")
        #expect(removed.timeIntervalSince(expiry) >= 0, "not before the expiry")
        #expect(try !setup.user.canOpen(setup.node, .read))
        #expect(daemon.log.contains("enforcement run failed"), "\(daemon.log)")
        // The ledger could not say so yet; once it can, the retry records the expiry.
        let standing = try TestProcess.run("/usr/bin/sqlite3", [daemon.stateDirectory + "/ledger.db",
                                                                "SELECT count(*) FROM grants WHERE revoked_usec IS NULL"])
        #expect(standing.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(standing.stdout)")
        #expect(try TestProcess.run("/usr/bin/chattr", ["-i", wal]).status == 0)
        let recorded = Self.waitFor(10) {
            let open = try? TestProcess.run("/usr/bin/sqlite3", [daemon.stateDirectory + "/ledger.db",
                                                                 "SELECT count(*) FROM grants WHERE revoked_usec IS NULL"])
            return open?.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0"
        }
        #expect(recorded != nil, "the retry did not record the expiry: \(daemon.log)")
        #expect(!setup.hasEntry)
        #expect(daemon.stop() == 0)
        #expect(try setup.offline(["audit", "--verify"], stateDirectory: daemon.stateDirectory).status == 0)
    }

    @Test func aGrantThatExpiredWhileTheDaemonWasDownIsRemovedBeforeReady() throws {
        let setup = try Setup("livedown")
        let first = try setup.daemon()
        let state = first.stateDirectory
        try setup.grant(["--for", "2s"], through: first)
        #expect(first.stop() == 0)
        #expect(setup.hasEntry)
        let expiry = try Self.newestExpiry(state)
        Thread.sleep(until: expiry.addingTimeInterval(0.5))
        #expect(setup.hasEntry, "nobody but a daemon would remove it")
        #expect(try setup.user.canOpen(setup.node, .readWrite), "expired but still in force: why start-up matters")

        let notify = try TemporaryDirectory()
        let receiver = try DatagramReceiver(path: notify.path + "/notify")
        let second = try setup.daemon(["--state-dir", state], environment: ["NOTIFY_SOCKET": notify.path + "/notify"],
                                      waitForReady: false)
        let ready = try #require(receiver.receive(timeout: 10), "no READY=1: \(second.log)")
        #expect(ready.split(separator: "\n").contains("READY=1"))
        #expect(!setup.hasEntry, "removed before READY=1")
        #expect(try !setup.user.canOpen(setup.node, .read))
        let log = second.log
        let run = try #require(log.range(of: "msg=\"enforcement run\" trigger=startup expired=1 changes=1"), "\(log)")
        #expect(log.range(of: "msg=\"grant expired\" grant=1")?.lowerBound ?? log.startIndex > run.lowerBound)
        #expect(second.stop() == 0)
    }

    // MARK: - Hotplug

    @Test func aReCreatedNodeGetsItsEntryAtOnce() throws {
        let setup = try Setup("liveplug")
        let daemon = try setup.daemon()
        try setup.grant([], through: daemon)
        #expect(setup.hasEntry)
        for round in 1...3 {
            try setup.recreateNode()
            // The node event applied it (its log line below), not a periodic run; how fast is
            // a benchmark's figure, not a timed assertion.
            #expect(Self.waitFor(30) { setup.hasEntry } != nil, "round \(round): no entry: \(daemon.log)")
            #expect(try setup.user.canOpen(setup.node, .readWrite), "round \(round)")
        }
        // The run logs after its edits: the entry can be gone a moment before the line is written.
        #expect(Self.waitFor(10) { daemon.log.contains("msg=\"enforcement run\" trigger=nodes expired=0 changes=1") } != nil,
                "\(daemon.log)")
        #expect(daemon.log.contains("it was missing (node re-created or an earlier run was interrupted)"))
        #expect(daemon.stop() == 0)
    }

    @Test func thePeriodicReconcileRepairsWhatNoEventReported() throws {
        let setup = try Setup("liveper")
        let daemon = try setup.daemon(["--reconcile-interval", "1"])
        try setup.grant([], through: daemon)
        // An ACL edit makes no event the daemon watches: only the periodic run sees it.
        try TestProcess.setup("setfacl", ["-x", "u:\(setup.user.uid)", setup.node])
        // Not checked absent here: with a 1 s period the run may repair it before this line
        // (a loaded CI machine did). The periodic run's own log line below says it did the repair.
        #expect(Self.waitFor(3) { setup.hasEntry } != nil, "\(daemon.log)")
        #expect(try setup.user.canOpen(setup.node, .readWrite))
        // The run logs after its edits: the entry can be gone a moment before the line is written.
        #expect(Self.waitFor(10) { daemon.log.contains("msg=\"enforcement run\" trigger=periodic expired=0 changes=1") } != nil,
                "\(daemon.log)")
        #expect(daemon.stop() == 0)
    }

    @Test func theIntervalZeroTurnsThePeriodicRunOff() throws {
        let setup = try Setup("liveoff")
        let daemon = try setup.daemon(["--reconcile-interval", "0"])
        try setup.grant([], through: daemon)
        try TestProcess.setup("setfacl", ["-x", "u:\(setup.user.uid)", setup.node])
        Thread.sleep(forTimeInterval: 1.5)
        #expect(!setup.hasEntry)
        #expect(!daemon.log.contains("trigger=periodic"))
        #expect(daemon.stop() == 0)
    }

    // MARK: - Concurrency

    /// Several root CLIs at once, all through the daemon, while nodes are re-created.
    @Test func concurrentRootCommandsAndTheDaemonConverge() throws {
        let setup = try Setup("liveconc")
        let others = try (1...3).map { try TestUser("liveconc\($0)") }
        let daemon = try setup.daemon()
        let state = daemon.stateDirectory
        // Timed grants from four CLI processes at once, while the node is re-created under
        // the daemon: every run meets writes of the others.
        let failures = Shared<[String]>([])
        let group = DispatchGroup()
        for user in [setup.user] + others {
            group.enter()
            Thread {
                defer { group.leave() }
                for _ in 0..<3 {
                    guard let result = try? setup.cli(["grant", "camera", "--user", user.name, "--for", "1s"],
                                                      through: daemon), result.status == 0 else {
                        failures.value.withLock { $0.append(user.name) }
                        return
                    }
                }
            }.start()
        }
        for _ in 0..<5 {
            try setup.recreateNode()
            usleep(50_000)
        }
        group.wait()
        #expect(failures.value.withLock { $0 }.isEmpty)
        let expiry = try Self.newestExpiry(state)
        // Every grant runs out within a second; the daemon alone ends them and removes every
        // entry. (A user may have no entry before then, when its grant met a re-created node.)
        Thread.sleep(until: expiry)
        // Ended in the ledger by the daemon (read from the file, not through devaccess).
        let ended = Self.waitFor(3) {
            let open = try? TestProcess.run("/usr/bin/sqlite3", [
                state + "/ledger.db", "SELECT count(*) FROM grants WHERE revoked_usec IS NULL",
            ]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            return open == "0"
        }
        #expect(ended != nil, "grants not ended by the daemon after their expiry: \(daemon.log)")
        let cleared = Self.waitFor(1.5) {
            ([setup.user] + others).allSatisfy { !ACLProbe.hasUserEntry(setup.node, uid: $0.uid) }
        }
        let acl = try TestProcess.run("/usr/bin/getfacl", ["-n", setup.node]).stdout
        #expect(cleared != nil, "\(acl)\n\(daemon.log)")
        #expect(!daemon.log.contains("enforcement run failed"), "\(daemon.log)")
        #expect(daemon.stop() == 0)
        let reconcile = try setup.offline(["reconcile"], stateDirectory: state)
        #expect(reconcile.status == 0)
        #expect(reconcile.stdout.contains("nothing to change"), "\(reconcile.stdout)")
        #expect(try setup.offline(["audit", "--verify"], stateDirectory: state).status == 0)
    }

}

/// The parts of live enforcement that need neither root nor a daemon process.
struct LiveEnforcerInProcessTests {
    @Test func theReconcileIntervalOption() throws {
        #expect(try DaemonOptions.parse([], environment: [:]).0.reconcileInterval == .seconds(60))
        #expect(try DaemonOptions.parse(["--reconcile-interval", "0"], environment: [:]).0.reconcileInterval == nil)
        #expect(try DaemonOptions.parse(["--reconcile-interval=5"], environment: [:]).0.reconcileInterval == .seconds(5))
        #expect(throws: DaemonOptions.UsageError.self) {
            try DaemonOptions.parse(["--reconcile-interval", "-1"], environment: [:])
        }
        #expect(DaemonOptions.help.contains("--reconcile-interval SEC"))
    }

    /// Operations handed to `perform` from many tasks run one at a time, in the worker.
    @Test func operationsRunOneAtATime() async throws {
        let directory = try TemporaryDirectory()
        let ledger = try Ledger(path: directory.path + "/ledger.db", journal: .disabled)
        let enforcer = Enforcer(ledger: ledger, devices: DeclaredDeviceSource(devices: []),
                                actor: Principal(uid: 0, name: "root"))
        let live = try LiveEnforcer(enforcer: enforcer, log: BrokerLog(target: .none),
                                    options: .init(reconcileInterval: nil, udevSubsystems: []))
        live.start()
        let inside = Shared(0)
        let overlaps = Shared(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<40 {
                group.addTask {
                    _ = try await live.perform("test \(index)") { (engine: Enforcer) throws(EnforcementError) in
                        let now = inside.value.withLock { count -> Int in
                            count += 1
                            return count
                        }
                        if now > 1 { overlaps.value.withLock { $0 += 1 } }
                        usleep(1_000)
                        inside.value.withLock { $0 -= 1 }
                        return try engine.reconcile()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(overlaps.value.withLock { $0 } == 0)
        live.stop()
        await #expect(throws: LiveEnforcer.Failure.stopped) {
            try await live.perform("after stop") { (engine: Enforcer) throws(EnforcementError) in try engine.reconcile() }
        }
    }
}

/// A value several threads update (a class, so closures can share the Mutex).
final class Shared<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ initial: Value) { value = Mutex(initial) }
}

/// Reads a node's access ACL directly (libacl, no process): is there a named user entry
/// for `uid`? Cheap enough to poll every few milliseconds.
enum ACLProbe {
    static func hasUserEntry(_ path: String, uid: UInt32) -> Bool {
        let entries = try? ACLReader.extendedEntries(at: path)
        return entries?.contains { $0.tag == .user(uid) } ?? false
    }
}
