import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// What a request comes to, built from the request and what devaccessd read (policy,
/// ledger, statuses) and consumed by `request`'s steps: what is answered at once, who
/// decides the rest (policy, the user, an administrator), and, after asking, the decisions
/// to record. Pure: a test builds one without a daemon.
public struct RequestPlan: Sendable {
    /// Answered: at once (refused, unavailable, already decided), or by a later step.
    public var results: [Permission: RequestResult] = [:]
    /// The permissions not answered at once, by the policy action that decides them.
    public var byAction: [PolicyAction: [Permission]] = [:]
    /// Each permission's details for the `received` audit event.
    public var received: [Permission: [String: String]] = [:]
    /// Decisions to record: policy's allows, then what a person decided.
    public var grants: [GrantPlan] = []
    /// How a prompt ended without a decision: nothing more is asked of the user, nor waited for.
    public var ended: UndecidedReason?
    /// How many prompts were put to the user.
    public var prompts: Int64 = 0

    /// `standing`: the user's standing decisions. `program`: the requester's program;
    /// `untrusted`: why devaccessd does not trust its identity (nil: trusted). `Program=`
    /// rules match only a program whose identity devaccessd trusts.
    public init(_ request: AccessRequest, statuses: [PermissionStatus], policy: Policy, user: UserIdentity,
                program: String?, untrusted: String?, location: LocationAsk?, standing: Decisions,
                switchedOff: (Permission) -> PrivacySwitch?, broker: Principal, now: Date) {
        let policyProgram = untrusted == nil ? program : nil
        for (permission, status) in zip(request.permissions, statuses) {
            let decision = policy.requestDecision(for: permission, user: user, program: policyProgram)
            let skipped = Self.programRuleNotApplied(permission, policy: policy, decision: decision, user: user,
                                                     program: program, untrusted: untrusted)
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
    /// off for everyone), or `answeredAtOnce`; nil when someone has to decide.
    static func answered(_ permission: Permission, status: PermissionStatus, decision: PolicyDecision,
                         skipped: String?, off: PrivacySwitch?, standing: [Grant], requested: ResolvedTerm?,
                         user: UserIdentity, location: LocationAsk?, now: Date) -> RequestResult? {
        if let off {
            return RequestResult(permission: permission, outcome: .restricted,
                message: "\(permission.rawValue) is " + off.sentence(formatTime: ISOTime.format)
                    + "; a request cannot change that; nothing was asked or recorded")
        }
        guard var answered = answeredAtOnce(permission, status: status, policy: decision, user: user,
                                            standing: standing, requested: requested,
                                            location: location, now: now) else { return nil }
        if let skipped { answered.message += " (\(skipped))" }
        return answered
    }

    /// Whether somebody is asked: a choice or a password.
    public var asksSomeone: Bool { byAction[.ask] != nil || byAction[.authSelf] != nil }

    /// Whether the request may record an allow.
    public var mayGrant: Bool { byAction[.allow] != nil || asksSomeone }

    /// `permissions` no decision was reached for, undecided for `why`.
    public mutating func leave(_ permissions: [Permission], undecided why: UndecidedReason) {
        for permission in permissions { results[permission] = RequestResult.undecided(permission, why) }
    }

    /// The plan when the process that asked has exited: `once` lasts while it runs, so an
    /// allow for `once` is not recorded but undecided.
    public func withoutOnceAllows() -> RequestPlan {
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
    public static func recorded(_ decided: [(plan: GrantPlan, result: Result<Grant, EnforcementError>)],
                         into results: [Permission: RequestResult], location: LocationAsk?)
        -> (results: [Permission: RequestResult], failed: [(Permission, EnforcementError)]) {
        var results = results
        var failed: [(Permission, EnforcementError)] = []
        for (plan, outcome) in decided {
            switch outcome {
            case .success(let grant):
                var result = RequestResult(for: grant, outcome: grant.decision == .allow ? .granted : .denied,
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
    public static func recordingFailure(_ failed: [(Permission, EnforcementError)], permissions: [Permission],
                                 decided: [Permission], results: [Permission: RequestResult]) -> String {
        let held = permissions.compactMap { permission -> String? in
            guard decided.contains(permission), let result = results[permission] else { return nil }
            return "\(permission.rawValue): \(result.outcome.rawValue), \(result.message)"
        }
        return "recording the decision failed for " + describe(failed)
            + (held.isEmpty ? "" : "; the rest was recorded: " + held.joined(separator: "; "))
    }

    /// "camera: why; microphone: why".
    public static func describe(_ failed: [(Permission, EnforcementError)]) -> String {
        failed.map { "\($0.rawValue): \($1.description)" }.joined(separator: "; ")
    }

    /// The `answered` event's details: for each result no grant of this request stands for.
    public static func answeredDetails(_ ordered: [RequestResult]) -> [Permission: [String: String]] {
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
    public var changedStatuses: Bool { !grants.isEmpty || byAction[.authAdmin] != nil || prompts > 0 }
}

// MARK: Answered at once

extension RequestPlan {
    /// When a `Program=` rule names the requester's program and would have decided
    /// otherwise: the sentence saying why it did not; else nil.
    /// `untrusted`: why the program's identity is not trusted (nil: trusted).
    static func programRuleNotApplied(_ permission: Permission, policy: Policy, decision: PolicyDecision,
                                      user: UserIdentity, program: String?, untrusted: String?) -> String? {
        guard let program else { return nil }
        let named = policy.decision(for: permission, user: user, program: program)
        guard named != decision else { return nil }
        let rule = "the rule for \(program)" + (named.origin.map { " (\($0))" } ?? "") + " was not applied: "
        if let untrusted { return rule + untrusted }
        return rule + "device access lists name users, not programs, and the policy forbids \(permission.rawValue) to "
            + "\(user.name) whatever program asks"
    }

    /// Policy deny, no device, a standing decision, or access the user already has:
    /// nothing to ask. Nil when someone has to decide.
    static func answeredAtOnce(_ permission: Permission, status: PermissionStatus, policy: PolicyDecision,
                               user: UserIdentity, standing: [Grant], requested: ResolvedTerm? = nil,
                               location: LocationAsk? = nil, now: Date = Date()) -> RequestResult? {
        if policy.action == .deny {
            return RequestResult(permission: permission, outcome: .restricted,
                                 message: policy.explanation(permission, user: user) + "; a request cannot change that")
        }
        if status.status == .unavailable {
            let why = status.reasons.first { $0.kind == .unavailable }?.message ?? "no device serves it"
            return RequestResult(permission: permission, outcome: .unavailable,
                                 message: "nothing to grant: \(why); nothing was asked or recorded")
        }
        if status.status == .denied, let denial = standing.first(where: { $0.decision == .deny }) {
            var result = RequestResult(for: denial, outcome: .alreadyDenied, term: nil)
            result.message = "\(user.name) is denied \(permission.rawValue) by an earlier decision, "
                + Decisions.describe(denial) + "; it is not asked again (an administrator can 'devaccess reset' it)"
            return result
        }
        let allow = standing.first { $0.decision == .allow }
        if let allow, let requested, requested.outlasts(allow, now: now) {
            // A longer term than the standing grant's: decided again (per policy), and if
            // allowed, the new grant replaces the old one.
            return nil
        }
        if permission == .location, let location {
            return answeredAtOnce(location: location, standing: standing)
        }
        if status.status == .authorized {
            if let allow {
                var result = RequestResult(for: allow, outcome: .alreadyAllowed, term: nil)
                result.message = "already allowed: " + Decisions.describe(allow)
                return result
            }
            return RequestResult(permission: permission, outcome: .alreadyAllowed,
                                 message: "\(user.name) can already use every \(permission.rawValue) device; nothing to ask")
        }
        if let allow {
            // Allowed, yet not every node opens: drift, which the status explains; asking again would not help.
            var result = RequestResult(for: allow, outcome: .alreadyAllowed, term: nil)
            result.message = "already allowed by " + Decisions.describe(allow) + ", but the status is "
                + status.status.rawValue + "; see its reasons"
            return result
        }
        return nil
    }

    /// Location is served by devaccessd to the users a grant (or the policy's allow) names,
    /// at its level; gpsd's own openness is a way around that status reports, not access
    /// this answers with. So: a standing grant at the level asked (after the cap) or finer
    /// answers; a finer level than any standing grant's is decided again.
    static func answeredAtOnce(location: LocationAsk, standing: [Grant]) -> RequestResult? {
        let allows = standing.filter { $0.decision == .allow && $0.program == nil }
        guard let best = allows.max(by: { ($0.locationLevel ?? .exact) < ($1.locationLevel ?? .exact) }),
              let level = best.locationLevel, level >= location.granted else { return nil }
        var result = RequestResult(for: best, outcome: .alreadyAllowed, term: nil)
        result.message = "already allowed at \(level.rawValue) accuracy, \(level.approximately): "
            + Decisions.describe(best) + location.capNote
        return result
    }

    /// Whether what is left to decide changes nothing: nothing at all, or only permissions
    /// for an administrator that are already waiting in a request of the user's (a new
    /// request then only points at the old one).
    public static func changesNothing(_ byAction: [PolicyAction: [Permission]], user: UserIdentity,
                               ledger: Ledger, location: LocationAsk? = nil) -> Bool {
        if byAction.isEmpty { return true }
        guard byAction.count == 1, let forAdmin = byAction[.authAdmin] else { return false }
        guard let waiting = try? ledger.pendingRequests(uid: user.uid) else { return false }
        return forAdmin.allSatisfy { permission in
            waiting.contains { covers($0, permission, location: location) }
        }
    }

    /// Whether a waiting request already asks for `permission`: for location, at the level
    /// asked or finer (a finer level is a new request).
    public static func covers(_ waiting: PendingRequest, _ permission: Permission, location: LocationAsk?) -> Bool {
        guard waiting.permissions.contains(permission) else { return false }
        guard permission == .location, let location, let level = waiting.locationLevel else { return true }
        return level >= location.asked
    }
}

extension RequestPlan {
    /// How many allow grants the user namespaces of person `accountable` hold, when this
    /// request of one of its subordinate uids may grant and they hold `limit` already; nil
    /// when it may grant. Root, administrators and a person's own uid are not counted.
    public func subordinateGrantsOver(_ grants: [Grant], caller: Caller, accountable: UInt32, limit: Int) -> Int? {
        guard mayGrant, accountable != caller.uid, !caller.isUnlimited else { return nil }
        let held = grants.filter { grant in
            grant.decision == .allow && grant.subject.uid != accountable
                && SubordinateIDs.accountable(grant.subject.uid) == accountable
        }.count
        return held >= limit ? held : nil
    }
}
