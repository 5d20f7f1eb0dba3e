import Testing
import FoundationEssentials
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessEngine
@testable import DevAccessBroker

/// `RunPlan`: what a run's permissions come to before anyone is asked, built without a
/// daemon from the order and what devaccessd read.
@Suite struct RunPlanTests {
    static let alice = UserIdentity(uid: 4101, name: "alice", primaryGID: 4101, groups: [])
    static let broker = Principal(uid: 0, name: "devaccessd")
    static let program = Program(path: "/usr/bin/cheese", sha256: "ab12")

    static func subject(trusted: Bool = true, scope: GrantTerm? = nil) -> RunPlan.Subject {
        RunPlan.Subject(user: alice, program: program, trusted: trusted, scope: scope, broker: broker)
    }

    static func status(_ permission: Permission, _ status: AuthorizationStatus) -> PermissionStatus {
        PermissionStatus(permission: permission, status: status, devices: [], reasons: [])
    }

    static func grant(_ permission: Permission, _ decision: Decision, program: Program? = nil, uid: UInt32 = 4101,
                      accuracy: LocationAccuracy? = nil) -> Grant {
        Grant(id: 7, subject: Principal(uid: uid, name: "alice"), program: program, permission: permission,
              decision: decision, scope: .always, created: Date(timeIntervalSince1970: 1_700_000_000),
              decidedBy: Principal(uid: uid, name: "alice"), method: .consent, accuracy: accuracy)
    }

    static func plan(_ permissions: [Permission], statuses: [AuthorizationStatus], actions: [Permission: PolicyAction],
                     grants: [Grant] = [], off: [Permission] = [], trusted: Bool = true,
                     accuracy: LocationAccuracy? = nil, cap: LocationAccuracy? = nil) -> RunPlan {
        let switches = off.map { PrivacySwitch(permission: $0, hard: false, by: Principal(uid: 0, name: "root"),
                                                since: Date(timeIntervalSince1970: 1_700_000_000)) }
        return RunPlan(permissions, statuses: zip(permissions, statuses).map { status($0, $1) },
                       subject: subject(trusted: trusted), accuracy: accuracy, grants: grants,
                       switchedOff: { permission in switches.first { $0.permission == permission } },
                       policies: { permission in
                           PolicyDecision(action: actions[permission] ?? .ask,
                                          accuracyCap: cap.map { PolicyDecision.AccuracyCap(level: $0, origin: nil) })
                       })
    }

    @Test func eachPolicyActionSaysWhoDecides() {
        let plan = Self.plan([.camera, .microphone, .location], statuses: [.notDetermined, .notDetermined, .notDetermined],
                             actions: [.camera: .allow, .microphone: .ask, .location: .authSelf])
        #expect(plan.grants.map(\.permission) == [.camera])
        #expect(plan.grants.first?.method == .policy)
        #expect(plan.grants.first?.decidedBy == Self.broker)
        // No term named: a run's policy allow is `once`.
        #expect(plan.grants.first?.term == ResolvedTerm(.once))
        #expect(plan.toAsk == [.microphone])
        #expect(plan.toConfirm == [.location])
        #expect(plan.results.isEmpty)
        #expect(plan.asksSomeone)
        #expect(!plan.refusedAtOnce)
        #expect(!plan.notStarting)
    }

    @Test func aSwitchedOffPermissionIsRefusedBeforeThePolicyIsRead() {
        let plan = Self.plan([.camera], statuses: [.authorized], actions: [.camera: .allow], off: [.camera])
        #expect(plan.results[.camera]?.outcome == .restricted)
        #expect(plan.results[.camera]?.message.contains("a run cannot change that; nothing was asked or run") == true)
        #expect(plan.grants.isEmpty)
        #expect(plan.refusedAtOnce)
        #expect(plan.notStarting)
    }

    @Test func anAdministratorsDecisionIsNotWaitedFor() {
        let plan = Self.plan([.camera], statuses: [.notDetermined], actions: [.camera: .authAdmin])
        let result = plan.results[.camera]
        #expect(result?.outcome == .restricted)
        #expect(result?.message.contains("'devaccess grant camera --user alice --program /usr/bin/cheese'") == true)
        #expect(plan.refusedAtOnce)
    }

    @Test func noDeviceIsUnavailableAndAccessAlreadyHeldIsAlreadyAllowed() {
        let plan = Self.plan([.camera, .microphone], statuses: [.unavailable, .authorized],
                             actions: [.camera: .ask, .microphone: .ask])
        #expect(plan.results[.camera]?.outcome == .unavailable)
        #expect(plan.results[.microphone]?.outcome == .alreadyAllowed)
        #expect(!plan.asksSomeone)
        // Unavailable is refused at once: charged to the attempt budget, not the change budget.
        #expect(plan.refusedAtOnce)
    }

    @Test func aStandingProgramGrantAnswersOnlyForAProgramOnlyRootCanChange() {
        let grants = [Self.grant(.camera, .allow, program: Self.program)]
        let trusted = Self.plan([.camera], statuses: [.notDetermined], actions: [.camera: .ask], grants: grants)
        #expect(trusted.results[.camera]?.outcome == .alreadyAllowed)
        #expect(trusted.results[.camera]?.message.hasPrefix("already allowed: ") == true)
        #expect(trusted.toAsk.isEmpty)
        let untrusted = Self.plan([.camera], statuses: [.notDetermined], actions: [.camera: .ask], grants: grants,
                                  trusted: false)
        #expect(untrusted.results[.camera] == nil)
        #expect(untrusted.toAsk == [.camera])
        // Another user's grant never answers.
        let others = Self.plan([.camera], statuses: [.notDetermined], actions: [.camera: .ask],
                               grants: [Self.grant(.camera, .allow, program: Self.program, uid: 4102)])
        #expect(others.toAsk == [.camera])
    }

    @Test func aStandingDenialIsAlreadyDeniedAndStopsTheRun() {
        let plan = Self.plan([.camera], statuses: [.notDetermined], actions: [.camera: .allow],
                             grants: [Self.grant(.camera, .deny, program: Self.program)])
        #expect(plan.results[.camera]?.outcome == .alreadyDenied)
        #expect(plan.results[.camera]?.message.hasPrefix("denied by an earlier decision: ") == true)
        #expect(plan.grants.isEmpty)
        #expect(plan.notStarting)
    }

    @Test func aCoarserLocationAllowIsDecidedAgain() {
        let coarse = [Self.grant(.location, .allow, program: Self.program, accuracy: .city)]
        let exact = Self.plan([.location], statuses: [.notDetermined], actions: [.location: .ask], grants: coarse)
        #expect(exact.location?.granted == .exact)
        #expect(exact.toAsk == [.location])
        let city = Self.plan([.location], statuses: [.notDetermined], actions: [.location: .ask], grants: coarse,
                             accuracy: .city)
        #expect(city.results[.location]?.outcome == .alreadyAllowed)
        // Under MaxAccuracy=city an exact ask gets city: the city grant answers it.
        let capped = Self.plan([.location], statuses: [.notDetermined], actions: [.location: .ask], grants: coarse,
                               cap: .city)
        #expect(capped.location?.granted == .city)
        #expect(capped.results[.location]?.outcome == .alreadyAllowed)
        #expect(capped.receivedDetails(program: "/usr/bin/cheese")
                == ["run": "true", "program": "/usr/bin/cheese", "accuracy": "exact", "accuracy_granted": "city"])
    }

    @Test func theOrdersPermissionsOrThePolicysDeclaredOnes() throws {
        #expect(try RunPlan.permissions([.microphone], declared: nil, program: "/p").get() == [.microphone])
        #expect(try RunPlan.permissions([], declared: [.camera], program: "/p").get() == [.camera])
        guard case .failure(let undeclared) = RunPlan.permissions([], declared: nil, program: "/p") else {
            Issue.record("no permissions and none declared must be refused")
            return
        }
        #expect(undeclared.reason.contains("no [Program] section of the policy declares /p"))
        guard case .failure(let unsupported) = RunPlan.permissions([.camera, Permission(rawValue: "screen")], declared: nil,
                                                                           program: "/p")
        else {
            Issue.record("a permission a run cannot be given must be refused")
            return
        }
        #expect(unsupported.reason.contains("not screen"))
    }

    @Test func aRunThatDoesNotStartLeavesItsAllowsUnrecorded() {
        var plan = Self.plan([.camera, .microphone], statuses: [.notDetermined, .notDetermined],
                             actions: [.camera: .allow, .microphone: .ask])
        plan.leave([.microphone], undecided: .timeout)
        #expect(plan.notStarting)
        let results = plan.withAllowsUnrecorded()
        #expect(results[.camera]?.outcome == .undecided)
        #expect(results[.camera]?.why == .dismissed)
        #expect(results[.microphone]?.why == .timeout)
        // The plan itself is a value: building the reply does not change it.
        #expect(plan.results[.camera] == nil)
    }

    @Test func aProgramItsUserCanChangeGetsThisRunOnly() {
        var plan = Self.plan([.camera, .microphone], statuses: [.notDetermined, .notDetermined], actions: [:])
        plan.grants = [
            GrantPlan(permission: .camera, decision: .allow, term: ResolvedTerm(.duration(seconds: 600)), method: .consent,
                      decidedBy: Self.broker),
            GrantPlan(permission: .microphone, decision: .deny, term: ResolvedTerm(.always), method: .consent,
                      decidedBy: Self.broker),
        ]
        #expect(plan.runAllows(trusted: true).map(\.term) == [ResolvedTerm(.duration(seconds: 600))])
        #expect(plan.runAllows(trusted: false).map(\.term) == [ResolvedTerm(.once, cap: 600)])
    }
}
