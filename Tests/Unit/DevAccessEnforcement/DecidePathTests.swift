import Foundation
import Testing
import DevAccessCore
import DevAccessLedger
@testable import DevAccessEnforcement
import DevAccessTestSupport

/// The one decide path: an administrator's decisions and a request's (a prompt, a password,
/// the policy) are recorded and applied by `Enforcer.decide`; a request's keep who decided
/// and how.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users, device nodes and ACLs"))
struct DecidePathTests {
    func consent(_ fx: EngineFixture, _ decision: Decision, _ term: ResolvedTerm) -> Enforcer.DecisionRequest {
        Enforcer.DecisionRequest(subject: fx.principal(fx.alice), permission: .camera, decision: decision, term: term,
                                 from: fx.clock.now, holder: nil, reason: "asked", decidedBy: fx.principal(fx.alice),
                                 method: .consent)
    }

    /// `date` is `seconds` after `start`, to the ledger's microsecond.
    func ends(_ date: Date?, _ seconds: TimeInterval, after start: Date) -> Bool {
        date.map { abs($0.timeIntervalSince(start) - seconds) < 0.000_01 } ?? false
    }

    @Test func aRequestsDecisionKeepsWhoDecidedAndHow() throws {
        let fx = try EngineFixture("dpath")
        let node = try fx.camera("video0")
        let alice = fx.principal(fx.alice)
        let first = try fx.engine().decide(consent(fx, .allow, ResolvedTerm(.duration(seconds: 3600))))
        #expect(first.grant.method == .consent && first.grant.decidedBy == alice)
        #expect(first.grant.scope == .duration && ends(first.grant.expires, 3600, after: fx.clock.now))
        #expect(try fx.alice.canOpen(node, .readWrite))

        // A longer term replaces it; the replaced grant is ended by the one who decided.
        let second = try fx.engine().decide(consent(fx, .allow, ResolvedTerm(.always)))
        #expect(second.ended.map(\.id) == [first.grant.id])
        let revokes = try fx.ledger().events().filter { $0.event.type == .revoke }
        #expect(revokes.map(\.event.actor) == [alice])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.ledger().verify().isIntact)
    }

    /// A user-wide allow at a prompt leaves the user's program grants (`devaccess run`), as
    /// an administrator's does; a user-wide denial ends them too.
    @Test func aUserWideAllowLeavesProgramGrantsAndADenialEndsThem() throws {
        let fx = try EngineFixture("dprog")
        try fx.camera("video0")
        let program = try fx.engine().decide(Enforcer.DecisionRequest(
            subject: fx.principal(fx.alice), permission: .camera, decision: .allow, scope: .always,
            program: Program(path: "/usr/bin/cheese")))
        let allowed = try fx.engine().decide(consent(fx, .allow, ResolvedTerm(.always)))
        #expect(allowed.ended.isEmpty)
        #expect(try fx.ledger().activeGrants(uid: fx.alice.uid, permission: .camera, now: fx.clock.now).map(\.id)
            .sorted() == [program.grant.id, allowed.grant.id])

        let denied = try fx.engine().decide(consent(fx, .deny, ResolvedTerm(.always)))
        #expect(denied.grant.method == .consent && denied.grant.decision == .deny)
        #expect(Set(denied.ended.map(\.id)) == [program.grant.id, allowed.grant.id])
    }

    /// Several decisions (a request's permissions) are recorded in order and applied in one run.
    @Test func aRequestsDecisionsAreAppliedTogether() throws {
        let fx = try EngineFixture("dmany")
        let node = try fx.camera("video0")
        var location = consent(fx, .allow, ResolvedTerm(.once, cap: 600))
        location.permission = .location
        location.accuracy = .city
        location.holder = ProcessHolder(pid: getpid(), startTicks: 1, bootID: "test")
        let outcomes = try fx.engine().decide([consent(fx, .allow, ResolvedTerm(.always)), location]).map { try $0.get() }
        #expect(outcomes.map(\.grant.permission) == [.camera, .location])
        #expect(outcomes[1].grant.scope == .once && ends(outcomes[1].grant.expires, 600, after: fx.clock.now))
        #expect(outcomes[1].grant.accuracy == .city && outcomes[1].grant.method == .consent)
        // One run for both; location is served by devaccessd, which its own outcome says.
        #expect(outcomes[1].report.notes.contains { $0.hasPrefix("location:") })
        #expect(!outcomes[0].report.notes.contains { $0.hasPrefix("location:") })
        #expect(try fx.alice.canOpen(node, .readWrite))
    }

    /// Hostile review L2: the policy changed while a person was asked for camera and
    /// microphone; they allowed the camera (now forbidden) and denied the microphone. The
    /// denial only ends access: it is recorded and applied whatever became of the allow,
    /// and only the allow fails, saying why.
    @Test func aForbiddenAllowDoesNotDropTheDenialsOfItsBatch() throws {
        let fx = try EngineFixture("dforb")
        let camera = try fx.camera("video0")
        let microphone = try fx.microphone("pcm0")
        let policy = PolicyText()
        let engine = try fx.engine(policy: policy)
        let alice = fx.principal(fx.alice)
        let standing = try engine.decide(Enforcer.DecisionRequest(subject: alice, permission: .microphone,
                                                                  decision: .allow, scope: .always))
        #expect(try fx.alice.canOpen(microphone, .readWrite))
        #expect(try fx.acl(microphone).contains { $0.tag == .user(fx.alice.uid) })

        policy.set("[camera]\nDefault=deny\n")
        var deny = consent(fx, .deny, ResolvedTerm(.always))
        deny.permission = .microphone
        let results = engine.decide([consent(fx, .allow, ResolvedTerm(.always)), deny])

        // Each has its own result: the allow's refusal names the policy; the denial holds.
        #expect(results.count == 2)
        guard case .failure(.policyForbids(let why)) = results.first else {
            Issue.record("the forbidden allow was not refused for the policy: \(String(describing: results.first))")
            return
        }
        #expect(why.contains("camera"))
        let denial = try #require(try results.last?.get())
        #expect(denial.grant.permission == .microphone && denial.grant.decision == .deny)
        #expect(denial.ended.map(\.id) == [standing.grant.id])

        let grants = try fx.ledger().activeGrants(uid: fx.alice.uid, permission: .microphone, now: fx.clock.now)
        #expect(grants.map(\.decision) == [.deny])
        #expect(grants.first?.method == .consent && grants.first?.decidedBy == alice)
        #expect(!grants.contains { $0.id == standing.grant.id })
        #expect(try !fx.acl(microphone).contains { $0.tag == .user(fx.alice.uid) })
        #expect(try !fx.alice.canOpen(microphone, .readWrite))
        // The forbidden allow gave nothing.
        #expect(try fx.ledger().activeGrants(uid: fx.alice.uid, permission: .camera, now: fx.clock.now).isEmpty)
        #expect(try !fx.alice.canOpen(camera, .readWrite))
        #expect(try fx.ledger().verify().isIntact)
    }

    /// Hostile review L2, for approvals: alice's request for camera and microphone waits for
    /// an administrator; meanwhile the policy comes to forbid the microphone. The approval
    /// grants the camera (recorded and applied) and refuses the microphone alone, saying
    /// why; the request is resolved (not left waiting), and the audit chain holds.
    @Test func anApprovalGrantsWhatThePolicyAllowsAndRefusesTheRestAlone() throws {
        let fx = try EngineFixture("dappr")
        let camera = try fx.camera("video0")
        let microphone = try fx.microphone("pcm0")
        let policy = PolicyText()
        let carol = Principal(uid: 0, name: "root")
        let engine = try fx.engine(policy: policy).acting(as: carol)
        let alice = fx.principal(fx.alice)
        let queued = try fx.ledger().queueRequest(NewPendingRequest(subject: alice, permissions: [.camera, .microphone],
                                                                    scope: .always, reason: "lab"))

        policy.set("[microphone]\nDefault=deny\n")
        let approvals = [Permission.camera, .microphone].map { permission in
            Enforcer.DecisionRequest(subject: alice, permission: permission, decision: .allow, scope: .always,
                                     reason: "approved request \(queued.id)")
        }
        let resolved: (request: PendingRequest, results: [Enforcer.DecisionResult])
        do {
            resolved = try engine.resolve(queued.id, as: .approved, decisions: approvals, note: "ok")
        } catch {
            Issue.record("the approval failed as a whole, the camera with the microphone: \(error)")
            #expect(try fx.alice.canOpen(camera, .readWrite), "the camera's approval was lost with the microphone's")
            return
        }

        #expect(resolved.request.resolution == .approved && resolved.request.resolvedBy == carol)
        #expect(try fx.ledger().pendingRequests().isEmpty, "the request is resolved, not left waiting")
        #expect(resolved.results.count == 2)
        let granted = try #require(try resolved.results.first?.get())
        #expect(granted.grant.permission == .camera && granted.grant.decision == .allow)
        #expect(granted.grant.method == .admin && granted.grant.decidedBy == carol)
        #expect(try fx.alice.canOpen(camera, .readWrite))
        guard case .failure(.policyForbids(let why))? = resolved.results.last else {
            Issue.record("the forbidden microphone was not refused for the policy: \(String(describing: resolved.results.last))")
            return
        }
        #expect(why.contains("microphone"), "\(why)")
        #expect(try fx.ledger().activeGrants(uid: fx.alice.uid, permission: .microphone, now: fx.clock.now).isEmpty)
        #expect(try !fx.alice.canOpen(microphone, .readWrite))
        #expect(try fx.ledger().verify().isIntact)
        // The audit trail does not say the microphone was approved and leave it there.
        let resolutions = try fx.ledger().events().map(\.event).filter {
            $0.type == .request && $0.details["stage"] == "approved"
        }
        let byPermission = Dictionary(resolutions.map { ($0.permission, $0.details) }, uniquingKeysWith: { $1 })
        #expect(byPermission[.camera]?["outcome"] == nil, "\(resolutions)")
        #expect(byPermission[.microphone]?["outcome"] == "not-granted", "\(resolutions)")
        #expect(byPermission[.microphone]?["why"]?.contains("microphone") == true, "\(resolutions)")
    }

    /// Each decision of a batch has its own result, in order: one naming a device that is
    /// gone fails alone, and the allow beside it is recorded and applied.
    @Test func eachDecisionOfABatchHasItsOwnResult() throws {
        let fx = try EngineFixture("deach")
        let camera = try fx.camera("video0")
        let microphone = try fx.microphone("pcm0")
        var gone = consent(fx, .allow, ResolvedTerm(.always))
        gone.deviceID = "camera:unplugged"
        var allow = consent(fx, .allow, ResolvedTerm(.always))
        allow.permission = .microphone
        let results = try fx.engine().decide([gone, allow])
        #expect(results.count == 2)
        guard case .failure(.unknownDevice(let id, .camera, _, _)) = results.first else {
            Issue.record("the allow of a gone device did not fail for it: \(String(describing: results.first))")
            return
        }
        #expect(id == "camera:unplugged")
        let granted = try #require(try results.last?.get())
        #expect(granted.grant.permission == .microphone && granted.grant.decision == .allow)
        #expect(try fx.alice.canOpen(microphone, .readWrite))
        #expect(try !fx.alice.canOpen(camera, .readWrite))
        #expect(try fx.ledger().activeGrants(uid: fx.alice.uid, permission: .camera, now: fx.clock.now).isEmpty)
    }
}
