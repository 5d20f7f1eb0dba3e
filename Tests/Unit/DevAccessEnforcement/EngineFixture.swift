import Foundation
import Glibc
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// A clock the test moves by hand, so expiry needs no sleeping.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date = Date()) { current = start }

    var now: Date { lock.withLock { current } }

    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
}

/// A device source whose answer the test sets: for simulating a node that changes between
/// the probe and the edit (the race ACLWriter's own check exists for).
final class FixedDeviceSource: DeviceSource, @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [Permission: AdapterReport]

    init(_ reports: [AdapterReport]) {
        self.reports = Dictionary(reports.map { ($0.permission, $0) }, uniquingKeysWith: { a, _ in a })
    }

    func report(for permission: Permission) -> AdapterReport {
        lock.withLock { reports[permission] } ?? AdapterReport(permission: permission, devices: [],
                                                                unavailableReason: "none declared")
    }
}

/// Policy text a test sets and changes (nil: no policy), parsed at every read.
final class PolicyText: @unchecked Sendable {
    private let lock = NSLock()
    private var text: String?

    init(_ text: String? = nil) { self.text = text }

    func set(_ text: String?) { lock.withLock { self.text = text } }

    func reading() -> PolicyReading? {
        guard let text = lock.withLock({ self.text }) else { return nil }
        do {
            return .loaded(try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)]))
        } catch {
            return .unreadable(problem: "\(error)")
        }
    }
}

/// Real nodes (mknod 1:3), real users, a ledger in a temporary directory, and an engine
/// wired to them. Every ACL edit and every open in these tests is real.
final class EngineFixture: @unchecked Sendable {
    let nodes: TemporaryDirectory
    let state: TemporaryDirectory
    let alice: TestUser
    let bob: TestUser
    let clock = TestClock()
    let root = Principal(uid: 0, name: "root")
    private(set) var declared: [DeclaredDevice] = []

    init(_ tag: String) throws {
        nodes = try TemporaryDirectory()
        state = try TemporaryDirectory()
        alice = try TestUser("\(tag)a")
        bob = try TestUser("\(tag)b")
    }

    var ledgerPath: String { state.path + "/" + Ledger.fileName }

    func principal(_ user: TestUser) -> Principal { Principal(uid: user.uid, name: user.name) }

    /// Declares a camera with one capture node made now (owner root, 0600 unless told).
    @discardableResult
    func camera(_ name: String, group: String = "root", mode: String = "0600") throws -> String {
        let path = try nodes.makeNullNode(name, group: group, mode: mode)
        declared.append(DeclaredDevice(permission: .camera, id: "camera:test-\(name)", name: "Test camera \(name)",
                                       nodes: [DeclaredNode(path: path, major: 1, minor: 3)]))
        return path
    }

    func declare(_ device: DeclaredDevice) { declared.append(device) }

    func ledger() throws -> Ledger { try Ledger(path: ledgerPath, journal: .disabled) }

    /// Declares a microphone with one playback-and-capture node made now (owner root, 0600).
    @discardableResult
    func microphone(_ name: String) throws -> String {
        let path = try nodes.makeNullNode(name)
        declared.append(DeclaredDevice(permission: .microphone, id: "microphone:test-\(name)",
                                       name: "Test microphone \(name)",
                                       nodes: [DeclaredNode(path: path, major: 1, minor: 3)]))
        return path
    }

    /// The engine; `policy`: the policy text it applies from now on (nil: none), read at
    /// every run as the daemon's is, so a test can change it between two decisions.
    func engine(devices: (any DeviceSource)? = nil, policy: PolicyText? = nil) throws -> Enforcer {
        let clock = self.clock
        return Enforcer(ledger: try ledger(), devices: devices ?? DeclaredDeviceSource(devices: declared), actor: root,
                        clock: { clock.now },
                        policy: { policy.flatMap { $0.reading() } })
    }

    func allow(_ user: TestUser, device: String? = nil, scope: GrantTerm.Word = .always, expires: Date? = nil,
               engine: Enforcer? = nil) throws -> Enforcer.DecisionOutcome {
        try (engine ?? self.engine()).decide(Enforcer.DecisionRequest(
            subject: principal(user), permission: .camera, deviceID: device, decision: .allow, scope: scope,
            expires: expires))
    }

    func deny(_ user: TestUser, device: String? = nil) throws -> Enforcer.DecisionOutcome {
        try engine().decide(Enforcer.DecisionRequest(subject: principal(user), permission: .camera, deviceID: device,
                                                     decision: .deny, scope: .always))
    }

    /// Status as `devaccess status` computes it, from the ledger file and the nodes now.
    func status(_ user: TestUser) throws -> PermissionStatus {
        let identity = try UserDatabase.identity(uid: user.uid)
        let report = DeclaredDeviceSource(devices: declared).report(for: .camera)
        return LedgerStatus.evaluate(report, for: identity,
                                     ledger: LedgerStatus.read(stateDirectory: state.path, now: clock.now))
    }

    func acl(_ path: String) throws -> [ACLEntry] {
        try ACLReader.extendedEntries(at: path) ?? []
    }

    func getfacl(_ path: String) throws -> String {
        try TestProcess.run("/usr/bin/getfacl", ["-P", "-c", "-n", path]).stdout
    }
}

extension Array where Element == DriftItem {
    func kinds(for uid: UInt32) -> [DriftItem.Kind] { filter { $0.uid == uid }.map(\.kind) }
}
