import Testing
import FoundationEssentials
import DevAccessCore
import DevAccessLedger
@testable import DevAccessEnforcement
import DevAccessProtocol
@testable import DevAccessEngine
@testable import DevAccessBroker
import DevAccessInterface

/// `ApprovalPlan`: what an administrator's approve or reject of a pending request comes to
/// before the engine records it, built without a daemon.
@Suite struct ApprovalPlanTests {
    static let bob = UserIdentity(uid: 4301, name: "bob", primaryGID: 4301, groups: [])
    static let subject = Principal(uid: 4301, name: "bob")
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    static func policy(_ text: String) throws -> Policy {
        try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)])
    }

    static func request(_ permissions: [Permission], scope: GrantTerm? = .always,
                        accuracy: LocationAccuracy? = nil) -> PendingRequest {
        PendingRequest(id: 12, subject: subject, program: nil, permissions: permissions, scope: scope, reason: "call",
                       created: now, accuracy: accuracy)
    }

    static func plan(_ request: PendingRequest, approve: Bool, chosen: GrantTerm? = nil, policy: Policy,
                     off: [Permission] = []) -> ApprovalPlan {
        ApprovalPlan(request, approve: approve, chosen: chosen, policy: policy, user: bob,
                     switches: off.map { PrivacySwitch(permission: $0, hard: false, by: Principal(uid: 0, name: "root"),
                                                       since: now) },
                     reason: "approved request 12", clock: { now })
    }

    static func final(_ answer: ApprovalPlan.Answer) -> RequestResult? {
        if case .final(let result) = answer { return result }
        return nil
    }

    @Test func anApprovalDecidesEachPermissionForTheTermChosen() throws {
        let policy = try Self.policy("[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n")
        let plan = Self.plan(Self.request([.camera, .microphone]), approve: true, chosen: .duration(seconds: 600),
                             policy: policy)
        #expect(plan.decisions.map(\.permission) == [.camera, .microphone])
        #expect(plan.decisions.allSatisfy { $0.decision == .allow && $0.subject == Self.subject })
        #expect(plan.decisions.first?.reason == "approved request 12")
        guard case .decision(let index, let term, let capNote) = plan.answers[1] else {
            Issue.record("microphone must be decided by the engine")
            return
        }
        #expect(index == 1)
        #expect(term == ResolvedTerm(.duration(seconds: 600)))
        #expect(capNote.isEmpty)
    }

    @Test func whatIsSwitchedOffOrDeniedByNowIsNotGrantedButCanBeDenied() throws {
        let policy = try Self.policy("[camera]\nDefault=auth_admin\n[microphone]\nDefault=deny\n")
        let request = Self.request([.camera, .microphone])
        let approved = Self.plan(request, approve: true, policy: policy, off: [.camera])
        #expect(approved.decisions.isEmpty)
        let camera = try #require(Self.final(approved.answers[0]))
        #expect(camera.outcome == .restricted)
        #expect(camera.message.hasSuffix("nothing was granted (turn it on with 'devaccess switch camera on' first)"))
        let microphone = try #require(Self.final(approved.answers[1]))
        #expect(microphone.outcome == .restricted)
        #expect(microphone.message.hasSuffix(" now; nothing was granted"))
        // A denial is recorded whatever the switch or the policy says, and holds until reset.
        let rejected = Self.plan(request, approve: false, policy: policy, off: [.camera])
        #expect(rejected.decisions.map(\.decision) == [.deny, .deny])
        #expect(rejected.decisions.map(\.scope) == [.always, .always])
    }

    @Test func onceWithNoProcessToLastForIsNotGranted() throws {
        let policy = try Self.policy("[camera]\nDefault=auth_admin\n")
        let plan = Self.plan(Self.request([.camera], scope: .once), approve: true, policy: policy)
        let result = try #require(Self.final(plan.answers[0]))
        #expect(result.outcome == .undecided)
        #expect(result.why == .disconnected)
        #expect(result.message.contains("approve it with --for or --always"))
        #expect(plan.decisions.isEmpty)
        // Chosen --always instead: decided.
        #expect(Self.plan(Self.request([.camera], scope: .once), approve: true, chosen: .always,
                          policy: policy).decisions.count == 1)
    }

    @Test func locationIsGrantedAtTheLevelAskedUnderThePolicysCapNow() throws {
        let policy = try Self.policy("[location]\nDefault=auth_admin\nMaxAccuracy=city\n")
        let plan = Self.plan(Self.request([.location], accuracy: .exact), approve: true, policy: policy)
        #expect(plan.decisions.first?.accuracy == .city)
        guard case .decision(_, _, let capNote) = plan.answers[0] else {
            Issue.record("location must be decided by the engine")
            return
        }
        #expect(capNote.contains("caps location at city"))
    }

    @Test func eachPermissionsResultFromTheEnginesOwn() throws {
        let policy = try Self.policy("[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n"
            + "[location]\nDefault=auth_admin\n")
        let plan = Self.plan(Self.request([.camera, .microphone, .location]), approve: true, policy: policy)
        let grant = Grant(id: 40, subject: Self.subject, permission: .camera, decision: .allow, scope: .always,
                          created: Self.now, decidedBy: Principal(uid: 0, name: "root"), method: .admin)
        let decided: [Enforcer.DecisionResult] = [
            .success(Enforcer.DecisionOutcome(grant: grant, ended: [], report: EnforcementReport())),
            .failure(.policyForbids("the policy denies microphone to bob")),
            .failure(.policyUnreadable("no file")),
        ]
        let (results, failed) = plan.results(decided, permissions: [.camera, .microphone, .location], approve: true)
        #expect(results.map(\.outcome) == [.granted, .restricted])
        #expect(results.first?.grant == 40)
        #expect(results.last?.message.hasPrefix("the policy denies microphone to bob (the policy changed") == true)
        #expect(failed.map(\.0) == [.location])
    }
}
