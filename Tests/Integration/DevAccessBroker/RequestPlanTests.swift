import Testing
import FoundationEssentials
import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessEngine
@testable import DevAccessBroker
import DevAccessInterface

/// `RequestPlan`: what a request comes to (answered at once, who decides the rest, what to
/// record), built without a daemon from the request and what devaccessd read.
@Suite struct RequestPlanTests {
    static let alice = UserIdentity(uid: 4201, name: "alice", primaryGID: 4201, groups: [])
    static let broker = Principal(uid: 0, name: "devaccessd")
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    static func policy(_ text: String) throws -> Policy {
        try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)])
    }

    static func plan(_ request: AccessRequest, statuses: [AuthorizationStatus], policy: Policy,
                     requester: Requester = Requester(pid: 99, uid: 4201, program: "/usr/bin/cheese"),
                     grants: [Grant] = [], off: [Permission] = []) -> RequestPlan {
        let switches = off.map { PrivacySwitch(permission: $0, hard: false, by: Principal(uid: 0, name: "root"),
                                                since: now, reason: "meeting") }
        let location = request.permissions.contains(.location)
            ? LocationAsk(asked: request.accuracy ?? .exact, policy: policy.requestDecision(
                for: .location, user: alice, program: requester.policyProgram)) : nil
        return RequestPlan(request, statuses: zip(request.permissions, statuses).map {
                               PermissionStatus(permission: $0, status: $1, devices: [], reasons: [])
                           },
                           policy: policy, user: alice, requester: requester, location: location,
                           standing: Decisions(active: grants),
                           switchedOff: { permission in switches.first { $0.permission == permission } },
                           broker: broker, now: now)
    }

    static func grant(_ id: Int64, _ permission: Permission, _ decision: Decision) -> Grant {
        Grant(id: id, subject: Principal(uid: 4201, name: "alice"), permission: permission, decision: decision,
              scope: .always, created: now, decidedBy: Principal(uid: 4201, name: "alice"), method: .consent)
    }

    @Test func thePolicysActionSaysWhoDecidesAndAnAllowIsADecisionToRecord() throws {
        let policy = try Self.policy("[camera]\nDefault=allow\nKeep=1h\n[microphone]\nDefault=ask\n"
            + "[location]\nDefault=auth_admin\n")
        let plan = Self.plan(AccessRequest(permissions: [.camera, .microphone, .location]),
                             statuses: [.notDetermined, .notDetermined, .notDetermined], policy: policy)
        #expect(plan.results.isEmpty)
        #expect(plan.byAction == [.allow: [.camera], .ask: [.microphone], .authAdmin: [.location]])
        #expect(plan.grants.map(\.permission) == [.camera])
        #expect(plan.grants.first?.method == .policy)
        #expect(plan.grants.first?.decidedBy == Self.broker)
        // No term asked: the policy's Keep=.
        #expect(plan.grants.first?.term == ResolvedTerm(.duration(seconds: 3600)))
        #expect(plan.received[.microphone] == ["policy": "ask", "status_before": "notDetermined"])
        #expect(plan.received[.location]?["accuracy"] == "exact")
        #expect(plan.asksSomeone)
        #expect(plan.mayGrant)
        // Nothing asked, recorded or queued yet: only the queue changes the statuses.
        #expect(plan.changedStatuses)
    }

    @Test func aSwitchedOffPermissionIsAnsweredAtOnceAndSaysSoInItsAudit() throws {
        let policy = try Self.policy("[camera]\nDefault=allow\n")
        let plan = Self.plan(AccessRequest(permissions: [.camera]), statuses: [.notDetermined], policy: policy,
                             off: [.camera])
        #expect(plan.results[.camera]?.outcome == .restricted)
        #expect(plan.results[.camera]?.message.hasSuffix("a request cannot change that; nothing was asked or recorded")
                == true)
        #expect(plan.received[.camera]?["switched_off"]?.hasPrefix("switched off by root at ") == true)
        #expect(plan.byAction.isEmpty)
        #expect(plan.grants.isEmpty)
        #expect(!plan.changedStatuses)
    }

    @Test func aProgramRuleForAProgramNotTrustedSaysWhyItWasNotApplied() throws {
        let policy = try Self.policy("[camera]\nDefault=ask\n[Rule]\nPermission=camera\nProgram=/usr/bin/cheese\n"
            + "Action=allow\n")
        var requester = Requester(pid: 99, uid: 4201, program: "/usr/bin/cheese")
        requester.untrusted = "its file is writable by alice"
        let plan = Self.plan(AccessRequest(permissions: [.camera]), statuses: [.notDetermined], policy: policy,
                             requester: requester)
        let skipped = try #require(plan.received[.camera]?["program_rule_not_applied"])
        #expect(skipped.hasSuffix("was not applied: its file is writable by alice"))
        #expect(plan.byAction == [.ask: [.camera]])
        #expect(plan.grants.isEmpty)
        // Answered at once, the answer says so too.
        let absent = Self.plan(AccessRequest(permissions: [.camera]), statuses: [.unavailable], policy: policy,
                               requester: requester)
        #expect(absent.results[.camera]?.outcome == .unavailable)
        #expect(absent.results[.camera]?.message.hasSuffix("(\(skipped))") == true)
        // A trusted program gets its rule.
        let trusted = Self.plan(AccessRequest(permissions: [.camera]), statuses: [.notDetermined], policy: policy)
        #expect(trusted.byAction == [.allow: [.camera]])
        #expect(trusted.received[.camera]?["program_rule_not_applied"] == nil)
    }

    @Test func aStandingDecisionAnswersUnlessALongerTermIsAsked() throws {
        let policy = try Self.policy("[camera]\nDefault=ask\n[microphone]\nDefault=ask\n")
        let grants = [Self.grant(1, .camera, .deny), Self.grant(2, .microphone, .allow)]
        let plan = Self.plan(AccessRequest(permissions: [.camera, .microphone]), statuses: [.denied, .authorized],
                             policy: policy, grants: grants)
        #expect(plan.results[.camera]?.outcome == .alreadyDenied)
        #expect(plan.results[.microphone]?.outcome == .alreadyAllowed)
        #expect(!plan.asksSomeone)
        #expect(!plan.mayGrant)
    }

    @Test func whenTheAskerHasExitedAOnceAllowIsNotRecorded() throws {
        let policy = try Self.policy("[camera]\nDefault=allow\n[microphone]\nDefault=allow\nKeep=1h\n")
        let plan = Self.plan(AccessRequest(permissions: [.camera, .microphone]), statuses: [.notDetermined, .notDetermined],
                             policy: policy)
        let gone = plan.withoutOnceAllows()
        #expect(gone.grants.map(\.permission) == [.microphone])
        #expect(gone.results[.camera]?.outcome == .undecided)
        #expect(gone.results[.camera]?.why == .disconnected)
        #expect(gone.results[.microphone] == nil)
        // A denial for `once` is never dropped (it holds until reset).
        var denied = plan
        denied.grants[0].decision = .deny
        #expect(denied.withoutOnceAllows().grants.count == 2)
    }

    @Test func eachRecordedPermissionHasItsOwnOutcome() {
        let allow = GrantPlan(permission: .camera, decision: .allow, term: ResolvedTerm(.always), method: .consent,
                              decidedBy: Self.broker)
        var forbidden = allow
        forbidden.permission = .microphone
        var failing = allow
        failing.permission = .location
        let decided: [(plan: GrantPlan, result: Result<Grant, EnforcementError>)] = [
            (allow, .success(Self.grant(5, .camera, .allow))),
            (forbidden, .failure(.policyForbids("the policy denies microphone to alice"))),
            (failing, .failure(.policyUnreadable("no file"))),
        ]
        let (results, failed) = RequestPlan.recorded(decided, into: [:], location: nil)
        #expect(results[.camera]?.outcome == .granted)
        #expect(results[.camera]?.grant == 5)
        #expect(results[.microphone]?.outcome == .restricted)
        #expect(results[.microphone]?.message.hasPrefix("the policy denies microphone to alice (the policy changed") == true)
        #expect(results[.location] == nil)
        #expect(failed.map(\.0) == [.location])
        let text = RequestPlan.recordingFailure(failed, permissions: [.camera, .microphone, .location],
                                                decided: decided.map(\.plan.permission), results: results)
        #expect(text.hasPrefix("recording the decision failed for location: "))
        #expect(text.contains("; the rest was recorded: camera: granted, allowed"))
        #expect(text.contains("microphone: restricted, the policy denies microphone"))
    }

    @Test func theAnsweredEventNamesWhatNoNewGrantStandsFor() {
        let results = [
            RequestResult(permission: .camera, outcome: .granted, grant: 3, message: "allowed"),
            RequestResult(permission: .microphone, outcome: .undecided, why: .timeout, message: "no decision"),
            RequestResult(permission: .location, outcome: .alreadyAllowed, grant: 2, message: "already allowed"),
        ]
        let answered = RequestPlan.answeredDetails(results)
        #expect(answered[.camera] == nil)
        #expect(answered[.microphone] == ["outcome": "undecided", "why": "timeout"])
        #expect(answered[.location] == ["outcome": "already-allowed"])
    }
}
