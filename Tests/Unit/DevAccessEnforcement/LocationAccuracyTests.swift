import Foundation
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// `Enforcer.locationAccuracy(for:)`: what the location service serves a user. Every case
/// a user could hope to turn into more location than decided is here: a grant that expired,
/// a denial, the switch, the policy's cap, a program grant, a `once` grant whose process ended.
@Suite("Location accuracy the engine grants")
struct LocationAccuracyTests {
    /// A ledger in a temporary directory and an engine whose policy the test sets.
    final class Fixture: @unchecked Sendable {
        let state: TemporaryDirectory
        let clock = TestClock()
        let alice = Principal(uid: 4_000_101, name: "loc-alice")
        let students = GroupRef(gid: 4_000_200, name: "loc-students")
        private let lock = NSLock()
        private var policyText: String?

        init() throws {
            state = try TemporaryDirectory()
        }

        /// The policy from now on (nil: none; text that does not parse: unreadable).
        func setPolicy(_ text: String?) { lock.withLock { policyText = text } }

        func engine() throws -> Enforcer {
            let clock = self.clock
            let alice = self.alice
            let students = self.students
            return Enforcer(
                ledger: try Ledger(path: state.path + "/" + Ledger.fileName, journal: .disabled),
                devices: FixedDeviceSource([]), actor: Principal(uid: 0, name: "root"), clock: { clock.now },
                identities: { uid in
                    uid == alice.uid ? UserIdentity(uid: uid, name: alice.name, primaryGID: students.gid,
                                                    groups: [students]) : nil
                },
                policy: { [self] in
                    guard let text = lock.withLock({ policyText }) else { return nil }
                    do {
                        return .loaded(try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)]))
                    } catch {
                        return .unreadable(problem: "\(error)")
                    }
                })
        }

        @discardableResult
        func grant(_ accuracy: LocationAccuracy?, lasting seconds: Int64? = nil, program: String? = nil,
                   engine: Enforcer) throws -> Grant {
            try engine.decide(Enforcer.DecisionRequest(
                subject: alice, permission: .location, decision: .allow, scope: seconds == nil ? .always : .duration,
                lastingSeconds: seconds, program: program.map { Program(path: $0) }, accuracy: accuracy)).grant
        }
    }

    @Test func nothingWithoutAGrantOrAPolicyAllow() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        fx.setPolicy("[location]\nDefault=ask\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
    }

    @Test func theGrantsLevelAndTheFinestOfSeveral() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.city, engine: engine)
        #expect(try engine.locationAccuracy(for: fx.alice) == .city)
        // A grant without a level is exact (as every location grant was before levels).
        try fx.grant(nil, engine: engine)
        #expect(try engine.locationAccuracy(for: fx.alice) == .exact)
        // Recorded directly, two allows standing side by side: the finer one counts.
        let ledger = engine.ledger
        try ledger.revoke(permission: .location, uid: fx.alice.uid, by: engine.actor, at: fx.clock.now)
        for level in [LocationAccuracy.country, .street, .neighborhood] {
            try ledger.recordGrant(NewGrant(subject: fx.alice, permission: .location, decision: .allow, scope: .always,
                                            decidedBy: engine.actor, method: .admin, accuracy: level), at: fx.clock.now)
        }
        #expect(try engine.locationAccuracy(for: fx.alice) == .street)
    }

    /// A program grant is for `devaccess run` of that program only: it never tells the
    /// user's other programs (or the location service) anything.
    @Test func programGrantsDoNotCount() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.exact, program: "/usr/bin/true", engine: engine)
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        try fx.grant(.country, engine: engine)
        #expect(try engine.locationAccuracy(for: fx.alice) == .country)
    }

    @Test func expiryEndsIt() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.street, lasting: 60, engine: engine)
        fx.clock.advance(59)
        #expect(try engine.locationAccuracy(for: fx.alice) == .street)
        fx.clock.advance(1)
        // Not yet marked expired by any run: its time alone ends it.
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
    }

    @Test func aDenialWins() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.exact, engine: engine)
        _ = try engine.decide(Enforcer.DecisionRequest(subject: fx.alice, permission: .location, decision: .deny,
                                                   scope: .always))
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        // A denial newer than an allow that somehow still stands (written around the engine) wins too.
        fx.clock.advance(1)
        try engine.ledger.recordGrant(NewGrant(subject: fx.alice, permission: .location, decision: .allow,
                                               scope: .always, decidedBy: engine.actor, method: .admin,
                                               accuracy: .city), at: fx.clock.now)
        fx.clock.advance(1)
        try engine.ledger.recordGrant(NewGrant(subject: fx.alice, permission: .location, decision: .deny,
                                               scope: .always, decidedBy: engine.actor, method: .admin),
                                      at: fx.clock.now)
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        // Even where the policy allows location to everyone.
        fx.setPolicy("[location]\nDefault=allow\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        // A denial cannot carry a level.
        #expect(throws: EnforcementError.self) {
            try engine.decide(Enforcer.DecisionRequest(subject: fx.alice, permission: .location, decision: .deny,
                                                       scope: .always, accuracy: .city))
        }
    }

    @Test func switchOffGivesNothing() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.exact, engine: engine)
        _ = try engine.setSwitch(Enforcer.SwitchOrder(permission: .location, off: true, reason: "exam"))
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        fx.setPolicy("[location]\nDefault=allow\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        // A switch whose time ran out no longer holds, even before a run turns it on.
        _ = try engine.setSwitch(Enforcer.SwitchOrder(permission: .location, off: true,
                                                      until: fx.clock.now.addingTimeInterval(30)))
        fx.clock.advance(31)
        #expect(try engine.locationAccuracy(for: fx.alice) == .exact)
        _ = try engine.setSwitch(Enforcer.SwitchOrder(permission: .location, off: false))
        #expect(try engine.locationAccuracy(for: fx.alice) == .exact)
    }

    @Test func thePolicysCapApplies() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.exact, engine: engine)
        fx.setPolicy("""
            [Rule]
            Permission=location
            Group=loc-students
            MaxAccuracy=city
            Action=ask
            """)
        #expect(try engine.locationAccuracy(for: fx.alice) == .city)
        // A later rule that allows does not lift the cap of an earlier one that matches too.
        fx.setPolicy("""
            [Rule]
            Group=loc-students
            MaxAccuracy=neighborhood
            Action=ask

            [Rule]
            Permission=location
            User=loc-alice
            Action=allow
            """)
        #expect(try engine.locationAccuracy(for: fx.alice) == .neighborhood)
        // A coarser grant stays as coarse as it is.
        try fx.grant(.country, engine: engine)
        #expect(try engine.locationAccuracy(for: fx.alice) == .country)
        // The [location] section caps everyone.
        try fx.grant(.exact, engine: engine)
        fx.setPolicy("[location]\nMaxAccuracy=street\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == .street)
    }

    @Test func aPolicyAllowWithoutAGrantGivesTheCapOrExact() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        fx.setPolicy("[location]\nDefault=allow\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == .exact)
        fx.setPolicy("[Rule]\nPermission=location\nUser=loc-alice\nAction=allow\nMaxAccuracy=neighborhood\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == .neighborhood)
        // A rule for someone else gives alice nothing.
        fx.setPolicy("[Rule]\nPermission=location\nUser=someone-else\nAction=allow\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
    }

    @Test func policyDenyAndAnUnreadablePolicyGiveNothing() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        try fx.grant(.exact, engine: engine)
        fx.setPolicy("[Rule]\nPermission=location\nGroup=loc-students\nAction=deny\n")
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        fx.setPolicy("[location]\nMaxAccuracy=precise\n")
        #expect {
            try engine.locationAccuracy(for: fx.alice)
        } throws: { error in
            guard case .policyUnreadable(let problem) = error as? EnforcementError else { return false }
            return problem.contains("'precise' is not a location accuracy")
        }
    }

    /// A `once` grant lasts while its process runs: gone, it gives nothing, before any run ends it.
    @Test func aOnceGrantOfAProcessThatEndedGivesNothing() throws {
        let fx = try Fixture()
        let engine = try fx.engine()
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["60"]
        try child.run()
        let pid = child.processIdentifier
        let identity = try #require(ProcessTable.entry(pid))
        kill(pid, SIGKILL)  // SIGTERM may be blocked in the test process, and so in its children
        child.waitUntilExit()
        let bootID = try #require(ProcessTable.bootID())
        try engine.ledger.recordGrant(NewGrant(
            subject: fx.alice, permission: .location, decision: .allow, scope: .once, decidedBy: fx.alice,
            method: .consent, holder: ProcessHolder(pid: pid, startTicks: identity.startTicks, bootID: bootID),
            accuracy: .exact), at: fx.clock.now)
        #expect(try engine.locationAccuracy(for: fx.alice) == nil)
        let me = try #require(ProcessTable.entry(getpid()))
        try engine.ledger.recordGrant(NewGrant(
            subject: fx.alice, permission: .location, decision: .allow, scope: .once, decidedBy: fx.alice,
            method: .consent, holder: ProcessHolder(pid: getpid(), startTicks: me.startTicks, bootID: bootID),
            accuracy: .city), at: fx.clock.now)
        #expect(try engine.locationAccuracy(for: fx.alice) == .city)
    }
}

/// Status says the level: below exact, location is `limited` and the first reason names it.
@Suite("Location status at a level")
struct LocationStatusTests {
    let alice = UserIdentity(uid: 4_000_101, name: "loc-alice", primaryGID: 4_000_101, groups: [])
    /// gpsd gated to devaccessd (config/nftables/devaccess-gpsd.nft): the level decides.
    let report = Self.report(gated: true)

    static func report(gated: Bool) -> AdapterReport {
        AdapterReport(permission: .location, devices: [
            Device(permission: .location, id: "location:gpsd:/dev/ttyACM0", name: "u-blox", nodes: [],
                   route: .service(ServiceAccess(name: "gpsd", endpoint: "127.0.0.1:2947",
                                                 openToAllLocalUsers: !gated))),
        ])
    }

    func snapshot(_ accuracy: LocationAccuracy?) -> LedgerReading {
        let grant = Grant(id: 7, subject: Principal(uid: alice.uid, name: alice.name), permission: .location,
                          decision: .allow, scope: .always, created: Date(), decidedBy: Principal(uid: 0, name: "root"),
                          method: .admin, accuracy: accuracy)
        return .loaded(LedgerSnapshot(path: "/x", decisions: Decisions(active: [grant]), records: []))
    }

    func policy(_ text: String) throws -> PolicyReading {
        .loaded(try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)]))
    }

    @Test func belowExactIsLimitedAndSaysTheLevel() throws {
        let status = LedgerStatus.evaluate(report, for: alice, ledger: snapshot(.city), policy: try policy(""))
        #expect(status.status == .limited && status.accuracy == .city)
        #expect(status.reasons.first?.message
                    == "loc-alice is told this computer's location granted at city accuracy, about 10 km (grant 7)")
        #expect(status.reasons.contains { $0.message.contains("is gated: only devaccessd reaches it") })
    }

    /// gpsd open to every local program: the user can read exact positions from it, so
    /// status says so (authorized) and that the grant's level does not bind.
    @Test func anUngatedGpsdIsAuthorizedWhateverTheLevel() throws {
        let status = LedgerStatus.evaluate(Self.report(gated: false), for: alice, ledger: snapshot(.city),
                                           policy: try policy(""))
        #expect(status.status == .authorized && status.accuracy == .city)
        #expect(status.reasons.contains { $0.message.contains("the level does not bind") })
        #expect(status.reasons.contains { $0.message.contains("accepts any local program: access to it is not gated") })
    }

    @Test func gatedWithoutAGrantIsNotDetermined() throws {
        let status = LedgerStatus.evaluate(report, for: alice, ledger: .absent(path: "/x"), policy: try policy(""))
        #expect(status.status == .notDetermined && status.accuracy == nil)
        #expect(status.reasons.first?.message.contains("gated to devaccessd") == true, "\(status.reasons)")
    }

    @Test func exactIsAuthorized() throws {
        for level in [LocationAccuracy?.none, .exact] {
            let status = LedgerStatus.evaluate(report, for: alice, ledger: snapshot(level), policy: try policy(""))
            #expect(status.status == .authorized && status.accuracy == .exact)
        }
    }

    @Test func theCapAndAPolicyAllowShow() throws {
        let capped = LedgerStatus.evaluate(report, for: alice, ledger: snapshot(.exact),
                                           policy: try policy("[location]\nMaxAccuracy=neighborhood\n"))
        #expect(capped.status == .limited && capped.accuracy == .neighborhood)
        #expect(capped.reasons.first?.message.contains("exact capped by the policy's MaxAccuracy=neighborhood") == true)
        let allowed = LedgerStatus.evaluate(report, for: alice, ledger: .absent(path: "/x"),
                                            policy: try policy("[location]\nDefault=allow\nMaxAccuracy=street\n"))
        #expect(allowed.status == .limited && allowed.accuracy == .street)
        #expect(allowed.reasons.first?.message.contains("allowed by policy at street accuracy") == true)
        let restricted = LedgerStatus.evaluate(report, for: alice, ledger: snapshot(.city),
                                               policy: try policy("[location]\nDefault=deny\n"))
        #expect(restricted.status == .restricted && restricted.accuracy == nil)
    }
}
