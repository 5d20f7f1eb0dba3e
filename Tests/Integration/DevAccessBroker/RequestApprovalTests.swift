import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// Policy auth_admin: the request waits in the ledger; an administrator (a member of the
/// daemon's admin group) lists, approves or rejects it; anyone else is refused and audited.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups and nodes"))
struct RequestApprovalTests {
    /// A requester's reason is theirs to write: a newline or an escape in it must not add
    /// a row of its own, or redraw anything, in the table an administrator reads.
    @Test func aReasonCannotForgeRowsInThePendingTable() throws {
        let carol = try TestUser("fadmin")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n", admins: [carol])
        let mallory = try TestUser("forger")
        let forged = "lab\n99  root  camera  always  -  approved by root\u{1B}[2K"
        let queued = try mallory.withoutTerminal(["request", "camera", "--reason", forged] + setup.socket)
        #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        let table = try carol.devaccess(["pending"] + setup.socket)
        #expect(table.status == 0, "\(table.stderr)")
        let rows = table.stdout.split(separator: "\n")
        #expect(!rows.contains { $0.hasPrefix("99") }, "a forged row: \(table.stdout)")
        #expect(table.stdout.contains("lab\\n99"), "\(table.stdout)")
        #expect(!table.stdout.contains("\u{1B}"), "an escape reached the admin's terminal")
    }

    /// Found by the crash storm: devaccessd killed in the middle of an approval (the
    /// approving grant written, its ACL entry not yet made; DEVACCESS_TEST_CRASH_AT) left the
    /// request waiting beside the grant that approved it, so a later `reject` or `withdraw`
    /// contradicted a grant that stood. An approval is one decision: after the restart the
    /// request is approved, its grant stands, and the start-up reconcile made the entry.
    @Test func anApprovalKilledMidwayIsWholeAfterTheRestart() throws {
        let setup = try RequestSetup(policy: "[microphone]\nDefault=auth_admin\n",
                                     firstDaemonEnvironment: ["DEVACCESS_TEST_CRASH_AT": "after-ledger-write"])
        let erin = try TestUser("apkill")
        let queued = try erin.withoutTerminal(["request", "microphone", "--for", "1h"] + setup.socket)
        #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        let request = try #require(try setup.ledger().pendingRequests().first)

        let approving = try setup.daemon.client()
        #expect(throws: BrokerClientError.self) { try approving.resolve(request.id, approve: true) }
        #expect(setup.daemon.waitForExit(timeout: 10) == 137, "the crash point should have ended devaccessd")
        try setup.start()

        let after = try #require(try setup.ledger().pendingRequest(id: request.id))
        let grants = try setup.grants(erin)
        let state = after.resolution?.rawValue ?? "still waiting"
        #expect(after.resolution == .approved, "request \(request.id) is \(state) beside grants \(grants.map(\.id))")
        #expect(grants.count == 1 && grants.first?.isActive(at: Date()) == true, "\(grants)")
        #expect(try erin.canOpen(setup.microphone, .readWrite), "the start-up reconcile makes the approved entry")
        let again = try setup.daemon.client().send(.approve(PendingAction(pending: request.id)))
        guard case .error(let error) = again else {
            Issue.record("a second approval was taken: \(again)")
            return
        }
        #expect(error.reason.contains("already approved"), "\(error)")
        #expect(try setup.grants(erin).count == 1)
        #expect(try TestProcess.devaccess(["audit", "--verify"] + setup.socket).status == 0)
    }

    @Test func queuedThenApprovedByAnAdminAndRefusedToOthers() throws {
        let carol = try TestUser("admin")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n", admins: [carol])
        let erin = try TestUser("queued")
        let mallory = try TestUser("nosy")

        let queued = try erin.onTerminal(["request", "camera", "--for", "2h", "--reason", "lab work", "--json"] + setup.socket)
        #expect(queued.exit == 4, "\(queued.output)")
        #expect(queued.prompts == 0)
        #expect(queued.output.contains("queued as request 1 for an administrator"))
        #expect(queued.output.contains(#""outcome": "pending""#))
        #expect(try !erin.canOpen(setup.camera, .read))

        // The queue is in the ledger: it survives the requester leaving and a broker restart.
        try setup.restart()
        // Asked again while it waits: says so, queues nothing new.
        let again = try erin.onTerminal(["request", "camera"] + setup.socket)
        #expect(again.output.contains("already waiting as request 1"), "\(again.output)")
        #expect(try setup.ledger().pendingRequests().count == 1)

        // Only admins approve and reject, and see others' requests; the rest is refused and audited.
        let listing = try mallory.devaccess(["pending", "--json"] + setup.socket)
        #expect(listing.status == 0, "\(listing.stderr)")
        #expect((try json(listing.stdout)["requests"] as? [Any])?.isEmpty == true, "\(listing.stdout)")
        let refused = try mallory.devaccess(["approve", "1"] + setup.socket)
        #expect(refused.status == 77)
        #expect(refused.stderr.contains("may not approve request 1"))
        #expect(try mallory.devaccess(["reject", "1"] + setup.socket).status == 77)
        let refusals = try setup.ledger().events().map(\.event).filter { $0.type == .refused }
        #expect(refusals.map { $0.details["operation"] } == ["approve", "reject"])
        #expect(refusals.allSatisfy { $0.subject == Principal(uid: erin.uid, name: erin.name) })
        #expect(refusals.allSatisfy { $0.actor?.uid == mallory.uid })
        #expect(try setup.ledger().pendingRequest(id: 1)?.isWaiting == true, "refusals change nothing")

        let pending = try carol.devaccess(["pending", "--json"] + setup.socket)
        #expect(pending.status == 0, "\(pending.stderr)")
        let requests = try #require(try json(pending.stdout)["requests"] as? [[String: Any]])
        #expect(requests.count == 1)
        #expect(requests.first?["id"] as? Int == 1)
        #expect(requests.first?["user"] as? String == erin.name)
        #expect(requests.first?["permissions"] as? [String] == ["camera"])
        #expect(requests.first?["term"] as? String == "for" && requests.first?["duration"] as? Int == 7200)
        #expect(requests.first?["reason"] as? String == "lab work")
        // What asked: the program that ran the CLI (here the test's pty driver), not the CLI.
        #expect(requests.first?["program"] as? String == DaemonTests.realPath("/usr/bin/python3"), "\(requests)")
        let table = try carol.devaccess(["pending"] + setup.socket)
        #expect(table.stdout.contains("for 2h") && table.stdout.contains(erin.name))

        let approved = try carol.devaccess(["approve", "1", "--reason", "ok for the lab"] + setup.socket)
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(approved.stdout.contains("request 1 of \(erin.name) (uid \(erin.uid)) approved"))
        // Its end in local time with the time left (HumanTime), not the UTC of --json.
        #expect(approved.stdout.range(of: #"camera: allowed until \d\d:\d\d [^,]*, (1h59m|2h) left"#,
                                      options: .regularExpression) != nil
                || approved.stdout.range(of: #"camera: allowed until [A-Z][a-z]{2} \d+ [A-Z][a-z]{2} \d\d:\d\d [^,]*, (1h59m|2h) left"#,
                                         options: .regularExpression) != nil, "\(approved.stdout)")
        #expect(try erin.canOpen(setup.camera, .readWrite), "approved: the ACL entry is there")
        let grant = try #require(try setup.grants(erin).first)
        #expect(grant.method == .admin && grant.decidedBy == Principal(uid: carol.uid, name: carol.name))
        #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 7200) < 2)
        #expect(try setup.ledger().pendingRequests().isEmpty)
        // Once only.
        let twice = try carol.devaccess(["approve", "1"] + setup.socket)
        #expect(twice.status == 64 && twice.stderr.contains("already approved by \(carol.name)"), "\(twice.stderr)")
        #expect(try carol.devaccess(["reject", "99"] + setup.socket).status == 64)

        // The requester coming back finds it decided.
        let back = try erin.onTerminal(["request", "camera"] + setup.socket)
        #expect(back.exit == 0 && back.output.contains("already allowed"), "\(back.output)")
    }

    @Test func aWaitingRequesterHearsTheRejection() throws {
        let carol = try TestUser("admin")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let frank = try TestUser("waits")
        let waiting = ResultBox<TerminalRun>()
        let thread = Thread {
            waiting.set(Result { try frank.onTerminal(["request", "camera", "microphone", "--wait"] + setup.socket) })
        }
        thread.start()
        // Reject once the request is in the queue (the waiter registers right after).
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, (try? setup.ledger().pendingRequests().isEmpty) ?? true { usleep(50_000) }
        try #require(try setup.ledger().pendingRequests().count == 1)
        let rejected = try carol.devaccess(["reject", "1", "--deny", "--reason", "not on this machine"] + setup.socket)
        #expect(rejected.status == 0, "\(rejected.stderr)")
        let finished = try waiting.wait(seconds: 30)
        #expect(finished.exit == 3, "\(finished.output)")
        #expect(finished.output.contains("waiting for the answer"))
        #expect(finished.output.contains("camera      denied") && finished.output.contains("microphone  denied"))
        let grants = try setup.grants(frank)
        #expect(grants.count == 2 && grants.allSatisfy { $0.decision == .deny && $0.method == .admin })
        #expect(try !frank.canOpen(setup.camera, .read))
        // A rejection is a denial: not asked again.
        let again = try frank.onTerminal(["request", "camera"] + setup.socket)
        #expect(again.exit == 3 && again.output.contains("not asked again"), "\(again.output)")
    }
}

extension RequestApprovalTests {
    /// Camera asked (outside a login session: by password instead), microphone for an
    /// administrator: one request. The user dismisses the prompt, so the broker queues the
    /// microphone but does not keep a user who said nothing waiting.
    @Test func aDismissedPromptQueuesButDoesNotWait() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n[microphone]\nDefault=auth_admin\n")
        let gina = try TestUser("mixed")
        let started = Date()
        let run = try gina.onTerminal(["request", "camera", "microphone", "--wait", "--json"] + setup.socket,
                                      answers: [("Password", "\u{4}")])
        #expect(run.exit == 4, "\(run.output)")
        #expect(Date().timeIntervalSince(started) < 20)
        #expect(run.output.contains(#""why": "end-of-input""#))
        #expect(run.output.contains(#""outcome": "pending""#))
        #expect(!run.output.contains("waiting for the answer"))
        #expect(try setup.ledger().pendingRequests().map(\.permissions) == [[.microphone]])
        #expect(try setup.grants(gina).isEmpty)
    }
}

extension RequestApprovalTests {
    /// Hostile review L2, for approvals: requests for camera and microphone wait for an
    /// administrator; meanwhile the policy comes to forbid the microphone. `approve` grants
    /// the camera, refuses the microphone alone and says so per permission (text and
    /// --json), and exits as `request` does with a permission left restricted: 5. The
    /// request is resolved. A rejection with --deny of the same permissions denies both and
    /// exits 0, as before.
    @Test func anApprovalSaysWhichPermissionThePolicyNowForbids() throws {
        let carol = try TestUser("apadmin")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let erin = try TestUser("appart")
        let fay = try TestUser("apjson")
        let gus = try TestUser("apdeny")
        for user in [erin, fay, gus] {
            let queued = try user.withoutTerminal(["request", "camera", "microphone", "--for", "1h"] + setup.socket)
            #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        }
        let waiting = try setup.ledger().pendingRequests()
        try #require(waiting.count == 3)
        let ids = Dictionary(uniqueKeysWithValues: waiting.map { ($0.subject.uid, $0.id) })
        try Data("[camera]\nDefault=auth_admin\n[microphone]\nDefault=deny\n".utf8)
            .write(to: URL(fileURLWithPath: setup.config.path + "/devaccess.conf"))

        let approved = try carol.devaccess(["approve", String(ids[erin.uid] ?? 0)] + setup.socket)
        #expect(approved.status == 5, "the microphone was refused: \(approved.stdout) \(approved.stderr)")
        #expect(approved.stdout.contains("camera: allowed until"), "\(approved.stdout)")
        #expect(approved.stdout.contains("microphone: restricted: policy forbids microphone"), "\(approved.stdout)")
        #expect(approved.stderr.contains("microphone"), "the refusal is said on stderr too: \(approved.stderr)")
        let grants = try setup.grants(erin)
        #expect(grants.map(\.permission) == [.camera] && grants.first?.decision == .allow, "\(grants)")
        #expect(grants.first?.decidedBy == Principal(uid: carol.uid, name: carol.name))
        #expect(try erin.canOpen(setup.camera, .readWrite))
        #expect(try !erin.canOpen(setup.microphone, .read))
        #expect(try setup.ledger().pendingRequest(id: ids[erin.uid] ?? 0)?.resolution == .approved)

        let inJSON = try carol.devaccess(["approve", String(ids[fay.uid] ?? 0), "--json"] + setup.socket)
        #expect(inJSON.status == 5, "\(inJSON.stdout) \(inJSON.stderr)")
        let document = try json(inJSON.stdout)
        let results = try #require(document["results"] as? [[String: Any]], "\(inJSON.stdout)")
        #expect(results.map { $0["permission"] as? String } == ["camera", "microphone"], "\(inJSON.stdout)")
        #expect(results.map { $0["outcome"] as? String } == ["granted", "restricted"], "\(inJSON.stdout)")
        #expect(document["resolution"] as? String == "approved")
        #expect((document["pending"] as? Int).map(Int64.init) == ids[fay.uid], "the wire's 'pending' names the request: \(inJSON.stdout)")
        #expect(try fay.canOpen(setup.camera, .readWrite) && !fay.canOpen(setup.microphone, .read))

        // A rejection denies what the policy forbids as well: nothing in it is refused.
        let rejected = try carol.devaccess(["reject", String(ids[gus.uid] ?? 0), "--deny"] + setup.socket)
        #expect(rejected.status == 0, "\(rejected.stdout) \(rejected.stderr)")
        let denials = try setup.grants(gus)
        #expect(Set(denials.map(\.permission)) == [.camera, .microphone] && denials.allSatisfy { $0.decision == .deny })
        #expect(try setup.ledger().pendingRequests().isEmpty)
        #expect(try TestProcess.devaccess(["audit", "--verify"] + setup.socket).status == 0)
    }
}

/// One result from another thread.
final class ResultBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private let done = DispatchSemaphore(value: 0)
    private var value: Result<Value, any Error>?

    func set(_ result: Result<Value, any Error>) {
        lock.withLock { value = result }
        done.signal()
    }

    func wait(seconds: Double) throws -> Value {
        guard done.wait(timeout: .now() + seconds) == .success, let result = lock.withLock({ value }) else {
            throw SetupError("no result within \(seconds) s")
        }
        return try result.get()
    }
}
