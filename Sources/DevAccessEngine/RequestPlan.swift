import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol

/// What a request comes to, built from the request and what devaccessd read (policy,
/// ledger, statuses) and consumed by `request`'s steps: what is answered at once, who
/// decides the rest (policy, the user, an administrator), and, after asking, the decisions
/// to record. Pure: a test builds one without a daemon.
struct RequestPlan: Sendable {
    /// Answered: at once (refused, unavailable, already decided), or by a later step.
    var results: [Permission: RequestResult] = [:]
    /// The permissions not answered at once, by the policy action that decides them.
    var byAction: [PolicyAction: [Permission]] = [:]
    /// Each permission's details for the `received` audit event.
    var received: [Permission: [String: String]] = [:]
    /// Decisions to record: policy's allows, then what a person decided.
    var grants: [GrantPlan] = []
    /// How a prompt ended without a decision: nothing more is asked of the user, nor waited for.
    var ended: UndecidedReason?
    /// How many prompts were put to the user.
    var prompts: Int64 = 0

    /// `standing`: the user's standing decisions. `Program=` rules match only a program
    /// whose identity devaccessd trusts (`Requester.policyProgram`).
    init(_ request: AccessRequest, statuses: [PermissionStatus], policy: Policy, user: UserIdentity,
         requester: Requester, location: LocationAsk?, standing: Decisions,
         switchedOff: (Permission) -> PrivacySwitch?, broker: Principal, now: Date) {
        for (permission, status) in zip(request.permissions, statuses) {
            let decision = policy.requestDecision(for: permission, user: user, program: requester.policyProgram)
            let skipped = BrokerService.programRuleNotApplied(permission, policy: policy, decision: decision, user: user,
                                                              requester: requester)
            let off = switchedOff(permission)
            received[permission] = Self.receivedDetails(status, decision: decision, skipped: skipped, off: off,
                                                        location: permission == .location ? location : nil)
            // Only a term the request names can extend a standing grant; the default never does.
            if let answered = Self.answered(permission, status: status, decision: decision, skipped: skipped, off: off,
                                            standing: standing.grants(uid: user.uid, permission: permission),
                                            requested: request.scope.map { decision.term($0) }, user: user,
                                            location: location, now: now) {
                results[permission] = answered
                continue
            }
            byAction[decision.action, default: []].append(permission)
            if decision.action == .allow {
                grants.append(GrantPlan(permission: permission, decision: .allow, term: decision.term(request.scope),
                                        method: .policy, decidedBy: broker))
            }
        }
    }

    /// The `received` event's details of one permission.
    static func receivedDetails(_ status: PermissionStatus, decision: PolicyDecision, skipped: String?,
                                off: PrivacySwitch?, location: LocationAsk?) -> [String: String] {
        var details = ["policy": decision.action.rawValue, "status_before": status.status.rawValue]
        if let skipped { details["program_rule_not_applied"] = skipped }
        if let off {
            details["switched_off"] = off.sentence(formatTime: ISOTime.format)
            return details
        }
        if let location {
            details["accuracy"] = location.asked.rawValue
            if location.cappedBy != nil { details["accuracy_granted"] = location.granted.rawValue }
        }
        return details
    }

    /// Answered at once: a switch that is off (nobody is asked while a permission is switched
    /// off for everyone), or `BrokerService.answeredAtOnce`; nil when someone has to decide.
    static func answered(_ permission: Permission, status: PermissionStatus, decision: PolicyDecision,
                         skipped: String?, off: PrivacySwitch?, standing: [Grant], requested: ResolvedTerm?,
                         user: UserIdentity, location: LocationAsk?, now: Date) -> RequestResult? {
        if let off {
            return RequestResult(permission: permission, outcome: .restricted,
                message: "\(permission.rawValue) is " + off.sentence(formatTime: ISOTime.format)
                    + "; a request cannot change that; nothing was asked or recorded")
        }
        guard var answered = BrokerService.answeredAtOnce(permission, status: status, policy: decision, user: user,
                                                          standing: standing, requested: requested,
                                                          location: location, now: now) else { return nil }
        if let skipped { answered.message += " (\(skipped))" }
        return answered
    }

    /// Whether somebody is asked: a choice or a password.
    var asksSomeone: Bool { byAction[.ask] != nil || byAction[.authSelf] != nil }

    /// Whether the request may record an allow.
    var mayGrant: Bool { byAction[.allow] != nil || asksSomeone }

    /// `permissions` no decision was reached for, undecided for `why`.
    mutating func leave(_ permissions: [Permission], undecided why: UndecidedReason) {
        for permission in permissions { results[permission] = BrokerService.undecided(permission, why) }
    }

    /// The plan when the process that asked has exited: `once` lasts while it runs, so an
    /// allow for `once` is not recorded but undecided.
    func withoutOnceAllows() -> RequestPlan {
        var plan = self
        for grant in grants where grant.decision == .allow && grant.term.term == .once {
            plan.results[grant.permission] = RequestResult(
                permission: grant.permission, outcome: .undecided, why: .disconnected,
                message: "no decision: the process that asked has exited, and 'once' lasts only while it "
                    + "runs; nothing was recorded")
        }
        plan.grants.removeAll { $0.decision == .allow && $0.term.term == .once }
        return plan
    }

    /// Each permission's own outcome of recording: a denial holds even when an allow beside
    /// it was refused (the policy changed while the person was asked); `failed`: what the
    /// engine could not take.
    static func recorded(_ decided: [(plan: GrantPlan, result: Result<Grant, EnforcementError>)],
                         into results: [Permission: RequestResult], location: LocationAsk?)
        -> (results: [Permission: RequestResult], failed: [(Permission, EnforcementError)]) {
        var results = results
        var failed: [(Permission, EnforcementError)] = []
        for (plan, outcome) in decided {
            switch outcome {
            case .success(let grant):
                var result = BrokerService.result(for: grant, outcome: grant.decision == .allow ? .granted : .denied,
                                                  term: plan.term.term.word)
                if grant.locationLevel != nil, let location { result.message += location.capNote }
                results[plan.permission] = result
            case .failure(.policyForbids(let why)):
                results[plan.permission] = RequestResult(permission: plan.permission, outcome: .restricted,
                    message: why + " (the policy changed while this request was decided); nothing was recorded "
                        + "for \(plan.permission.rawValue); a request cannot change that")
            case .failure(let error):
                failed.append((plan.permission, error))
            }
        }
        return (results, failed)
    }

    /// Why recording failed, permission by permission, beside what did hold.
    static func recordingFailure(_ failed: [(Permission, EnforcementError)], permissions: [Permission],
                                 decided: [Permission], results: [Permission: RequestResult]) -> String {
        let held = permissions.compactMap { permission -> String? in
            guard decided.contains(permission), let result = results[permission] else { return nil }
            return "\(permission.rawValue): \(result.outcome.rawValue), \(result.message)"
        }
        return "recording the decision failed for " + describe(failed)
            + (held.isEmpty ? "" : "; the rest was recorded: " + held.joined(separator: "; "))
    }

    /// "camera: why; microphone: why".
    static func describe(_ failed: [(Permission, EnforcementError)]) -> String {
        failed.map { "\($0.rawValue): \($1.description)" }.joined(separator: "; ")
    }

    /// The `answered` event's details: for each result no grant of this request stands for.
    static func answeredDetails(_ ordered: [RequestResult]) -> [Permission: [String: String]] {
        var answered: [Permission: [String: String]] = [:]
        for result in ordered
        where result.grant == nil || result.outcome == .alreadyAllowed || result.outcome == .alreadyDenied {
            var details = ["outcome": result.outcome.rawValue]
            if let why = result.why { details["why"] = why.rawValue }
            if let pending = result.pending { details["pending_id"] = String(pending) }
            answered[result.permission] = details
        }
        return answered
    }

    /// Whether anything was recorded, queued or asked: then the statuses are computed again;
    /// else those of a moment ago are still the answer.
    var changedStatuses: Bool { !grants.isEmpty || byAction[.authAdmin] != nil || prompts > 0 }
}
