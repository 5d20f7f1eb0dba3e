import Foundation
import Glibc
import Synchronization
import Testing
import DevAccessCore
import DevAccessInterface
import DevAccessLedger
import DevAccessProtocol
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// Issue 17 item 5, crash storms: kill -9 devaccessd at random moments while admins grant
/// and revoke, users request (policy allow) and have requests approved, and short terms
/// expire; after every kill, every decision the daemon acknowledged is in the ledger, the
/// audit chain verifies offline, and the start-up reconcile alone brings every node's ACL
/// to what the ledger says stands.
///
/// `DEVACCESS_CRASH_STORM_ITERATIONS` (default 20, the smoke `make test` runs) and
/// `DEVACCESS_CRASH_STORM_SEED` (default random; printed) set the run: `make crash-storm
/// ITERATIONS=1000 [SEED=N]` is the long form (docs/robustness.md). A seed replays the kill
/// moments and the choice of operations; the threads' interleaving is the machine's.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and ACLs"))
struct CrashStormTests {
    @Test func killNineDuringAStormLosesNoAcknowledgedDecisionAndACLsConverge() throws {
        let settings = StormSettings.fromEnvironment()
        print("crash storm: \(settings.iterations) iterations, seed \(settings.seed) "
              + "(replay: DEVACCESS_CRASH_STORM_SEED=\(settings.seed))")
        fflush(nil)
        var storm = CrashStorm(settings: settings)
        // A fresh machine and ledger every `epoch` iterations: `audit --verify` walks the
        // whole chain after every kill, so one ever-growing ledger would make the run quadratic.
        var done = 0
        while done < settings.iterations {
            let count = min(settings.epoch, settings.iterations - done)
            guard try storm.runEpoch(first: done + 1, count: count) else { break }
            done += count
            print("crash storm: \(done) of \(settings.iterations) iterations passed")
            fflush(nil)
        }
        #expect(storm.tally.iterations == settings.iterations)
        print(storm.tally.summary(seed: settings.seed, seconds: Date().timeIntervalSince(storm.started)))
    }

    /// The storm's checks can fail: a standing grant's entry removed by hand, an entry no
    /// grant stands behind, a grant acknowledged but not recorded, and a revocation
    /// acknowledged for a grant that stands are each reported.
    @Test func theStormsChecksSeeAMissingEntryAStrayEntryAndALostDecision() throws {
        let lab = try StormLab()
        let daemon = try lab.startDaemon()
        let (alice, bob) = (lab.users[0], lab.users[1])
        let result = try BrokerClient(socketPath: lab.socket).perform(
            .decide(DecisionOrder(allow: true, permission: .camera, user: alice.name)))
        let granted = try JSONDecoder().decode(DecisionDocument.self, from: Data(JSONWriter.bytes(result.document)))
        #expect(try lab.convergence(spawned: daemon.spawned).problems.isEmpty)
        let acknowledged = Acknowledged()
        acknowledged.grant(granted.grant.id, .init(uid: alice.uid, permission: .camera, how: "grant"))
        #expect(try lab.lostAcknowledgements(acknowledged).isEmpty)

        let camera = lab.devices[0].nodes
        try TestProcess.setup("setfacl", ["-x", "u:\(alice.uid)", camera[0]])
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.uid):rw", camera[1]])
        let problems = try lab.convergence(spawned: daemon.spawned).problems
        #expect(problems.contains { $0.contains(alice.name) && $0.contains(camera[0]) && $0.contains("entry is absent") },
                "\(problems)")
        #expect(problems.contains { $0.contains(bob.name) && $0.contains(camera[1]) && $0.contains("no grant stands") },
                "\(problems)")

        acknowledged.grant(granted.grant.id + 1000, .init(uid: alice.uid, permission: .camera, how: "request"))
        acknowledged.revoked([granted.grant.id])
        let lost = try lab.lostAcknowledgements(acknowledged)
        #expect(lost.contains("grant \(granted.grant.id + 1000) (request, uid \(alice.uid), camera) is not in the ledger"),
                "\(lost)")
        #expect(lost.contains("grant \(granted.grant.id) was acknowledged as revoked but stands"), "\(lost)")
        #expect(daemon.stop() == 0)
    }
}

// MARK: - The run

/// The storm's loop: each iteration starts a daemon on the ledger the last one left and
/// kills it; the checks run in between.
struct CrashStorm {
    let settings: StormSettings
    var random: SeededGenerator
    var tally = StormTally()
    let started = Date()
    private var readyTime = 0.3

    init(settings: StormSettings) {
        self.settings = settings
        random = SeededGenerator(seed: settings.seed)
    }

    /// Iterations `first` ..< `first + count` on a machine and ledger of their own; false
    /// after recording the first failure.
    mutating func runEpoch(first: Int, count: Int) throws -> Bool {
        let lab = try StormLab()
        let acknowledged = Acknowledged()
        defer {
            let counts = acknowledged.counts
            tally.acknowledgedGrants += counts.grants
            tally.acknowledgedRevocations += counts.revoked
        }
        for iteration in first..<(first + count) {
            let context = "iteration \(iteration), seed \(settings.seed)"
            let daemon: StormDaemon
            if Double.random(in: 0..<1, using: &random) < 0.1 {
                // One kill in ten lands while the daemon starts: during its start-up reconcile.
                daemon = try lab.startDaemon(waitForReady: false)
                usleep(UInt32(Double.random(in: 0...(readyTime * 1.2), using: &random) * 1_000_000))
                let serving = (try? BrokerClient(socketPath: lab.socket, timeout: .milliseconds(1)).hello()) != nil
                kill(daemon.pid, SIGKILL)
                _ = daemon.waitForExit(timeout: 30)
                tally.kills[serving ? "start-up over, idle" : "start-up, before serving", default: 0] += 1
            } else {
                daemon = try lab.startDaemon()
                readyTime = Date().timeIntervalSince(daemon.spawned)
                // It serves: its start-up reconcile has run on what the last kill left.
                guard try converged(lab, daemon, context) else { return false }
                let workers = StormWorkers(lab: lab, acknowledged: acknowledged,
                                           seed: UInt64.random(in: 0...UInt64.max, using: &random))
                workers.start()
                usleep(UInt32(Double.random(in: 0...settings.window, using: &random) * 1_000_000))
                let inFlight = workers.inFlight()
                kill(daemon.pid, SIGKILL)
                let killedAt = Date()
                _ = daemon.waitForExit(timeout: 30)
                workers.stopAndJoin()
                tally.record(inFlight: inFlight, expiryDue: try lab.expiryDue(before: killedAt, within: 0.25))
                tally.operations += workers.attempted
                if let failure = workers.unexpected.first {
                    Issue.record("\(context): a client saw what no kill explains: \(failure)\n\(daemon.logTail)")
                    return false
                }
            }
            // The daemon is dead: what it acknowledged must be in the ledger, the ledger must
            // tell one story, and the chain must be intact. (The first daemon may die before
            // it made the ledger; nothing was acknowledged then.)
            guard lab.hasLedger || acknowledged.counts.grants + acknowledged.counts.revoked > 0 else {
                tally.iterations += 1
                continue
            }
            let lost = try lab.lostAcknowledgements(acknowledged) + lab.halfDoneApprovals()
            guard lost.isEmpty else {
                let missing = lost.joined(separator: "\n")
                Issue.record("\(context): the ledger after kill -9:\n\(missing)\n\(daemon.logTail)")
                return false
            }
            let verify = try lab.verifyAuditOffline()
            guard verify.isEmpty else {
                Issue.record("\(context): audit --verify --offline failed: \(verify)\n\(daemon.logTail)")
                return false
            }
            tally.iterations += 1
        }
        // The last kill's aftermath, checked like every other.
        let daemon = try lab.startDaemon()
        guard try converged(lab, daemon, "after iteration \(first + count - 1), seed \(settings.seed)") else { return false }
        #expect(daemon.stop() == 0, "devaccessd did not stop cleanly: \(daemon.logTail)")
        return true
    }

    /// The ACL check on a daemon that serves; records the failure.
    private mutating func converged(_ lab: StormLab, _ daemon: StormDaemon, _ context: String) throws -> Bool {
        let convergence = try lab.convergence(spawned: daemon.spawned)
        tally.judged += convergence.judged
        tally.undecided += convergence.undecided
        guard convergence.problems.isEmpty else {
            let problems = convergence.problems.joined(separator: "\n")
            let text = "\(context): ACLs did not converge to the ledger after the start-up reconcile:\n"
                + "\(problems)\n\(daemon.logTail)"
            Issue.record(Comment(rawValue: text))
            return false
        }
        return true
    }
}

// MARK: - Settings

struct StormSettings {
    var iterations: Int
    var seed: UInt64
    /// The longest a storm runs before its kill, in seconds (uniform in 0...window).
    var window: Double
    /// Iterations per machine and ledger.
    var epoch = 100

    static func fromEnvironment() -> StormSettings {
        let environment = ProcessInfo.processInfo.environment
        let iterations = environment["DEVACCESS_CRASH_STORM_ITERATIONS"].flatMap { Int($0) } ?? 20
        let seed = environment["DEVACCESS_CRASH_STORM_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...999_999_999)
        return StormSettings(iterations: max(1, iterations), seed: seed, window: 1.0)
    }
}

/// SplitMix64: the same seed, the same kill moments and operations.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

// MARK: - The machine under the storm

/// Two devices of two nodes each (mknod 1:3, root 0600), a policy that allows the camera
/// at once and queues the microphone for an administrator, three users, and one ledger
/// every daemon of the run shares.
final class StormLab: @unchecked Sendable {
    struct Device {
        var permission: Permission
        var id: String
        var nodes: [String]
    }

    let nodes: TemporaryDirectory
    let config: TemporaryDirectory
    let state: TemporaryDirectory
    let devices: [Device]
    let users: [TestUser]
    let socket: String
    private let devicesFile: String

    init() throws {
        nodes = try TemporaryDirectory()
        config = try TemporaryDirectory()
        state = try TemporaryDirectory()
        socket = nodes.path + "/broker.sock"
        devices = [
            Device(permission: .camera, id: "camera:storm-video-index0",
                   nodes: [try nodes.makeNullNode("video0"), try nodes.makeNullNode("video1")]),
            Device(permission: .microphone, id: "microphone:storm-card0",
                   nodes: [try nodes.makeNullNode("pcmC0D0c"), try nodes.makeNullNode("controlC0")]),
        ]
        devicesFile = try declareDevices(devices.map { device in
            ["permission": device.permission.rawValue, "id": device.id, "name": "Storm \(device.permission.rawValue)",
             "nodes": device.nodes.map { ["path": $0, "major": 1, "minor": 3] }]
        }, in: nodes)
        try Data("[camera]\nDefault=allow\n[microphone]\nDefault=auth_admin\n".utf8)
            .write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        users = try (0..<3).map { try TestUser("storm\($0)") }
    }

    /// A daemon on the lab's socket, policy and ledger. The change limit is lifted: the
    /// storm makes hundreds of decisions a minute per user, which is not what it tests.
    func startDaemon(waitForReady: Bool = true) throws -> StormDaemon {
        let daemon = try StormDaemon(arguments: ["--config-dir", config.path, "--state-dir", state.path,
                                                 "--max-changes-per-user", "1000000"],
                                     environment: ["DEVACCESS_TEST_DEVICES": devicesFile], socket: socket,
                                     waitForReady: waitForReady)
        return daemon
    }

    var hasLedger: Bool { FileManager.default.fileExists(atPath: state.path + "/" + Ledger.fileName) }

    func ledger() throws -> Ledger {
        try Ledger(path: state.path + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
    }

    /// Every acknowledged grant is a row of the right user and permission; every grant an
    /// acknowledged revoke ended is ended.
    func lostAcknowledgements(_ acknowledged: Acknowledged) throws -> [String] {
        let rows = Dictionary(uniqueKeysWithValues: try ledger().grants(includeInactive: true).map { ($0.id, $0) })
        var lost: [String] = []
        for (id, expected) in acknowledged.grants() {
            guard let row = rows[id] else {
                lost.append("grant \(id) (\(expected.how), uid \(expected.uid), \(expected.permission)) is not in the ledger")
                continue
            }
            if row.subject.uid != expected.uid || row.permission != expected.permission || row.decision != .allow {
                lost.append("grant \(id) is \(row.decision) \(row.permission) for \(row.subject.uid), "
                            + "acknowledged as allow \(expected.permission) for \(expected.uid)")
            }
        }
        for id in acknowledged.revokedIDs() where rows[id]?.revoked == nil {
            lost.append("grant \(id) was acknowledged as revoked but " + (rows[id] == nil ? "is not in the ledger" : "stands"))
        }
        return lost.sorted()
    }

    /// An approval is one decision: a request still waiting while a grant that approved it
    /// stands (or ended) means the approver's grant was recorded and the request's
    /// resolution was lost.
    func halfDoneApprovals() throws -> [String] {
        let ledger = try ledger()
        let grants = try ledger.grants(includeInactive: true)
        return try ledger.pendingRequests().compactMap { request in
            let approving = grants.filter { $0.reason.hasPrefix("approved request \(request.id)") }
            guard !approving.isEmpty else { return nil }
            return "request \(request.id) is still waiting, though grants \(approving.map(\.id)) approved it"
        }
    }

    /// Whether a grant's term ran out in the `seconds` before `moment` (the daemon dead,
    /// read from the ledger): the expiry timer's run was likely under way at the kill.
    func expiryDue(before moment: Date, within seconds: Double) throws -> Bool {
        try ledger().grants(includeInactive: true).contains { grant in
            guard let expires = grant.expires else { return false }
            return expires <= moment && expires > moment.addingTimeInterval(-seconds)
        }
    }

    /// `devaccess audit --verify --offline`: empty when the chain is intact.
    func verifyAuditOffline() throws -> String {
        let run = try TestProcess.devaccess(["audit", "--verify", "--offline", "--state-dir", state.path])
        return run.status == 0 && run.stdout.contains("audit chain intact") ? "" : "exit \(run.status): \(run.stdout) \(run.stderr)"
    }

    /// What differs between the nodes' ACLs and the ledger once the daemon spawned at
    /// `spawned` serves (its start-up reconcile has run). Only the storm's users are
    /// looked at. A grant whose expiry falls between the spawn and the end of this check
    /// may be in either state (the expiry timer, not the start-up reconcile, ends it), so
    /// that user's entries on that device are not judged.
    func convergence(spawned: Date) throws -> Convergence {
        var entries: [String: [UInt32: AccessMode]] = [:]
        for node in devices.flatMap(\.nodes) {
            do {
                for entry in try ACLReader.extendedEntries(at: node) ?? [] {
                    if case .user(let uid) = entry.tag { entries[node, default: [:]][uid] = entry.permissions }
                }
            } catch {
                return Convergence(problems: ["cannot read the ACL of \(node): \(error)"])
            }
        }
        let ledger = try ledger()
        let grants = try ledger.grants(includeInactive: true)
        let records = try ledger.aclEntries()
        let checked = Date()
        var report = Convergence()
        for grant in grants where grant.revoked == nil {
            if let expires = grant.expires, expires <= spawned {
                report.problems.append("grant \(grant.id) expired at \(expires) before the daemon started, still not ended")
            }
        }
        for device in devices {
            for user in users {
                let relevant = grants.filter {
                    $0.subject.uid == user.uid && $0.permission == device.permission && $0.decision == .allow
                        && $0.program == nil && ($0.deviceID == nil || $0.deviceID == device.id)
                }
                let undecided = relevant.contains { grant in
                    guard let expires = grant.expires else { return false }
                    return expires > spawned && expires <= checked
                }
                if undecided {
                    report.undecided += 1
                    continue
                }
                report.judged += 1
                let standing = relevant.filter { $0.isActive(at: checked) }
                for node in device.nodes {
                    let entry = entries[node]?[user.uid]
                    let recorded = records.filter { $0.nodePath == node && $0.qualifier == .user(user.uid) }
                    let name = "\(user.name) (\(user.uid)) on \(node)"
                    if !standing.isEmpty && entry != .readWrite {
                        report.problems.append("\(name): grants \(standing.map(\.id)) stand, entry is \(entry.map(\.word) ?? "absent")")
                    }
                    if standing.isEmpty && entry != nil {
                        report.problems.append("\(name): no grant stands, entry \(entry.map(\.word) ?? "") remains "
                                        + "(last grants \(relevant.prefix(3).map(\.id)))")
                    }
                    if (entry != nil) != !recorded.isEmpty {
                        report.problems.append("\(name): entry \(entry.map(\.word) ?? "absent"), records \(recorded.map(\.id))")
                    }
                }
            }
        }
        return report
    }

    /// What `convergence` found, and how many user-device pairs it judged or left alone.
    struct Convergence {
        var problems: [String] = []
        var judged = 0
        var undecided = 0
    }
}

/// devaccessd started for the storm: RunningDaemon with the moment it was spawned.
final class StormDaemon: @unchecked Sendable {
    let running: RunningDaemon
    let spawned: Date

    init(arguments: [String], environment: [String: String], socket: String, waitForReady: Bool) throws {
        spawned = Date()
        running = try RunningDaemon(arguments: arguments, environment: environment, socket: socket,
                                    waitForReady: waitForReady)
    }

    var pid: Int32 { running.pid }
    func waitForExit(timeout: Double) -> Int32? { running.waitForExit(timeout: timeout) }
    func stop() -> Int32? { running.stop() }

    /// The last lines of its log, for a failure message.
    var logTail: String {
        let lines = running.log.split(separator: "\n", omittingEmptySubsequences: false)
        return "devaccessd log (last 15 lines):\n" + lines.suffix(15).joined(separator: "\n")
    }
}

// MARK: - What the daemon acknowledged

/// Decisions a client got a reply for, across the whole run.
final class Acknowledged: Sendable {
    struct GrantFact: Sendable {
        var uid: UInt32
        var permission: Permission
        /// grant, request, approve.
        var how: String
    }

    private let state = Mutex<(grants: [Int64: GrantFact], revoked: Set<Int64>)>(([:], []))

    func grant(_ id: Int64, _ fact: GrantFact) { state.withLock { $0.grants[id] = fact } }
    func revoked(_ ids: [Int64]) { state.withLock { $0.revoked.formUnion(ids) } }
    func grants() -> [Int64: GrantFact] { state.withLock { $0.grants } }
    func revokedIDs() -> Set<Int64> { state.withLock { $0.revoked } }
    var counts: (grants: Int, revoked: Int) { state.withLock { ($0.grants.count, $0.revoked.count) } }
}

// MARK: - The storm's clients

/// Four clients on threads of their own until the kill: an admin granting and revoking
/// (root, protocol `decide`/`revoke`), two users running `devaccess request` (the camera is
/// allowed by policy, the microphone queues), and an admin approving what queued.
final class StormWorkers: @unchecked Sendable {
    private let lab: StormLab
    private let acknowledged: Acknowledged
    private let seed: UInt64
    private let stopping = Atomic<Bool>(false)
    private let group = DispatchGroup()
    private let flight = Mutex<[Int: String]>([:])
    private let attempts = Atomic<Int>(0)
    private let surprises = Mutex<[String]>([])

    init(lab: StormLab, acknowledged: Acknowledged, seed: UInt64) {
        self.lab = lab
        self.acknowledged = acknowledged
        self.seed = seed
    }

    /// Operations sent (acknowledged or not).
    var attempted: Int { attempts.load(ordering: .relaxed) }
    /// Replies that no kill explains (a refusal, a malformed document).
    var unexpected: [String] { surprises.withLock { $0 } }

    /// The kinds of operation sent and not yet answered at this moment.
    func inFlight() -> [String] { flight.withLock { Array($0.values) } }

    func start() {
        for slot in 0..<4 {
            group.enter()
            let seed = seed &+ UInt64(slot)
            let thread = Thread { [self] in
                defer { group.leave() }
                var random = SeededGenerator(seed: seed)
                while !stopping.load(ordering: .relaxed) {
                    switch slot {
                    case 0: adminStep(slot, &random)
                    case 3: approveStep(slot, &random)
                    default: requestStep(slot, &random)
                    }
                }
            }
            thread.name = "storm client \(slot)"
            thread.start()
        }
    }

    func stopAndJoin() {
        stopping.store(true, ordering: .relaxed)
        group.wait()
    }

    /// Marks `kind` in flight on `slot` for the duration of `body`.
    private func sending<R>(_ kind: String, slot: Int, _ body: () throws -> R) rethrows -> R {
        attempts.add(1, ordering: .relaxed)
        flight.withLock { $0[slot] = kind }
        defer { flight.withLock { _ = $0.removeValue(forKey: slot) } }
        return try body()
    }

    private func surprise(_ text: String) {
        // After the kill, anything may fail; before it, nothing should.
        if !stopping.load(ordering: .relaxed) { surprises.withLock { $0.append(text) } }
    }

    private func pause(_ random: inout SeededGenerator) {
        usleep(UInt32.random(in: 0...20_000, using: &random))
    }

    /// A grant (for 1-3 s, or until revoked; every device or one) or a revoke.
    private func adminStep(_ slot: Int, _ random: inout SeededGenerator) {
        let user = lab.users.randomElement(using: &random) ?? lab.users[0]
        let device = lab.devices.randomElement(using: &random) ?? lab.devices[0]
        let request: Request
        let kind: String
        if Int.random(in: 0..<3, using: &random) < 2 {
            let lasting: Int64? = Int.random(in: 0..<4, using: &random) == 0 ? nil : Int64.random(in: 1...3, using: &random)
            let oneDevice = Int.random(in: 0..<4, using: &random) == 0
            request = .decide(DecisionOrder(allow: true, permission: device.permission, user: user.name,
                                            device: oneDevice ? device.id : nil, lastingSeconds: lasting,
                                            reason: "crash storm"))
            kind = "grant"
        } else {
            request = .revoke(RevokeOrder(permission: device.permission, user: user.name, reason: "crash storm"))
            kind = "revoke"
        }
        let result: OperationResult
        do {
            result = try sending(kind, slot: slot) {
                try BrokerClient(socketPath: lab.socket, timeout: .seconds(30)).perform(request)
            }
        } catch {
            if case BrokerClientError.rejected(let frame) = error { surprise("\(kind): refused: \(frame)") }
            pause(&random)
            return
        }
        do {
            let bytes = Data(JSONWriter.bytes(result.document))
            if kind == "grant" {
                let document = try JSONDecoder().decode(DecisionDocument.self, from: bytes)
                acknowledged.grant(document.grant.id,
                                   .init(uid: document.grant.uid, permission: device.permission, how: "grant"))
                acknowledged.revoked(document.ended.map(\.id).filter { $0 != document.grant.id })
            } else {
                let document = try JSONDecoder().decode(RevokeDocument.self, from: bytes)
                acknowledged.revoked(document.revoked.map(\.id))
            }
        } catch {
            surprise("\(kind): undecodable result: \(error)")
        }
        pause(&random)
    }

    /// `devaccess request` as one of the users: the camera (granted by policy at once) or
    /// the microphone (queued for an administrator).
    private func requestStep(_ slot: Int, _ random: inout SeededGenerator) {
        let user = lab.users.randomElement(using: &random) ?? lab.users[0]
        let permission: Permission = Int.random(in: 0..<3, using: &random) < 2 ? .camera : .microphone
        let term = Int.random(in: 0..<4, using: &random) == 0 ? ["--always"] : ["--for", "\(Int.random(in: 1...3, using: &random))s"]
        let run: ProcessOutput
        do {
            run = try sending("request", slot: slot) {
                try user.withoutTerminal(["request", permission.rawValue, "--json", "--socket", lab.socket] + term)
            }
        } catch {
            surprise("request: cannot run devaccess: \(error)")
            return
        }
        // Exit 0 with the document: acknowledged. A queued microphone request exits 4 with
        // nothing on stdout; a kill makes it exit 69.
        guard run.status == 0 else {
            if permission == .camera && run.status != 69 && run.status != 4 {
                surprise("request camera: exit \(run.status): \(run.stderr)")
            }
            return
        }
        do {
            let document = try json(run.stdout)
            for result in document["results"] as? [[String: Any]] ?? [] {
                if let id = (result["grant"] as? NSNumber)?.int64Value {
                    acknowledged.grant(id, .init(uid: user.uid, permission: permission, how: "request"))
                }
            }
        } catch {
            surprise("request: undecodable output: \(run.stdout)")
        }
    }

    /// An administrator approving the oldest waiting request, for 1-3 s.
    private func approveStep(_ slot: Int, _ random: inout SeededGenerator) {
        let waiting: PendingListReply
        do {
            waiting = try sending("pending", slot: slot) {
                try BrokerClient(socketPath: lab.socket, timeout: .seconds(30)).pending()
            }
        } catch {
            usleep(20_000)
            return
        }
        guard let first = waiting.requests.first else {
            usleep(20_000)
            return
        }
        let resolved: ResolvedReply
        do {
            resolved = try sending("approve", slot: slot) {
                try BrokerClient(socketPath: lab.socket, timeout: .seconds(30))
                    .resolve(first.pending, approve: true, reason: "crash storm",
                             scope: .duration(seconds: Int64.random(in: 1...3, using: &random)))
            }
        } catch {
            // Another approval or the requester's withdrawal may have come first: not a surprise.
            return
        }
        for result in resolved.results {
            if let id = result.grant {
                acknowledged.grant(id, .init(uid: resolved.uid, permission: result.permission, how: "approve"))
            }
        }
    }
}

// MARK: - Figures

struct StormTally {
    var iterations = 0
    var operations = 0
    /// Kill -> count, by what was in flight when it came.
    var kills: [String: Int] = [:]
    var killsWithExpiryDue = 0
    var acknowledgedGrants = 0
    var acknowledgedRevocations = 0
    /// User-device pairs the convergence checks judged, and left alone (an expiry fell
    /// between the daemon's spawn and the check).
    var judged = 0
    var undecided = 0

    mutating func record(inFlight: [String], expiryDue: Bool) {
        let kinds = Set(inFlight)
        let phase = kinds.isEmpty ? "storm, nothing in flight" : "storm, in flight: " + kinds.sorted().joined(separator: "+")
        kills[phase, default: 0] += 1
        if expiryDue { killsWithExpiryDue += 1 }
    }

    func summary(seed: UInt64, seconds: Double) -> String {
        var lines = ["crash storm: \(iterations) iterations in \(String(format: "%.1f", seconds)) s, seed \(seed); "
                     + "\(operations) operations sent, \(acknowledgedGrants) grants and \(acknowledgedRevocations) revocations "
                     + "acknowledged, \(killsWithExpiryDue) kills within 250 ms after a grant's term ran out; "
                     + "ACL convergence judged \(judged) user-device pairs, left \(undecided) alone "
                     + "(an expiry between the spawn and the check)"]
        for (phase, count) in kills.sorted(by: { $0.value > $1.value }) {
            lines.append("  \(count) kills: \(phase)")
        }
        return lines.joined(separator: "\n")
    }
}
