import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessInterface

/// What a consent prompt offers and what its answer decides (`ask`: a choice on the login
/// terminal; `auth_self`: the password), from values only: the daemon asks, waits and
/// records, and takes from here what to offer, what to say and what an answer comes to.
public enum ConsentPlan {
    /// What an `ask` prompt offers: once; for a time (the request's, else the shortest
    /// Keep=, under the shortest MaxDuration=); always, where no MaxDuration= applies; deny.
    /// `shell`: the holder is the shell the request was typed in (`ResolvedTerm.text`).
    public static func askChoices(_ policies: [PolicyDecision], scope: GrantTerm?, holder: String?,
                                  shell: Bool = false, now: Double) -> [PromptChoice] {
        let cap = policies.compactMap(\.maxDurationSeconds).filter { $0 > 0 }.min()
        var forSeconds: Int64
        switch scope {
        case .duration(let seconds)?: forSeconds = seconds
        // 'always' where MaxDuration= applies: offer the longest time instead, and say so.
        case .always? where cap != nil: forSeconds = cap ?? GrantTerm.defaultAskSeconds
        default: forSeconds = policies.compactMap(\.keepSeconds).min() ?? GrantTerm.defaultAskSeconds
        }
        if let cap { forSeconds = min(forSeconds, cap) }
        let once = ResolvedTerm(.once).capped(cap)
        let longest = cap == forSeconds ? " (the longest the policy allows)" : ""
        var choices = [PromptChoice(allow: .once, label: "Allow \(once.text(holder: holder, shell: shell))"),
                       PromptChoice(allow: .duration(seconds: forSeconds),
                                    label: "Allow for \(DurationText.format(seconds: forSeconds))\(longest), until "
                                        + HumanTime(now: now).moment(now + Double(forSeconds)))]
        if cap == nil { choices.append(PromptChoice(allow: .always, label: "Allow always")) }
        choices.append(PromptChoice(choice: .deny, label: "Deny (remembered: you are not asked again)"))
        return choices
    }

    /// The decisions an answer typed on the login terminal makes for the `permissions` it
    /// names: an allow for the `term` chosen (nil: deny), under each permission's policy; a
    /// denial holds until reset. `level`: a coarser location level typed.
    public static func decided(_ permissions: [Permission], term: GrantTerm?, level: LocationAccuracy?,
                               policies: (Permission) -> PolicyDecision, subject: Principal) -> [GrantPlan] {
        permissions.map { permission in
            let allowed = term.map { policies(permission).term($0) }
            return GrantPlan(permission: permission, decision: allowed == nil ? .deny : .allow,
                             term: allowed ?? ResolvedTerm(.always), method: .consent, decidedBy: subject,
                             accuracy: permission == .location ? level : nil)
        }
    }

    /// The results of the permissions of `asked` the typed answer did not name: no decision
    /// (a person may allow less than was asked, never more).
    public static func unnamed(_ decided: [GrantPlan], asked: [Permission]) -> [Permission: RequestResult] {
        var results: [Permission: RequestResult] = [:]
        for permission in asked where !decided.contains(where: { $0.permission == permission }) {
            results[permission] = RequestResult(permission: permission, outcome: .undecided, why: .dismissed,
                message: "no decision: the answer typed did not name \(permission.rawValue); nothing was recorded, "
                    + "the next request asks again")
        }
        return results
    }

    /// The location levels an allow of `group` may name instead: those coarser than what this
    /// request would get (as iOS's "precise" switch); none without location.
    public static func coarserLevels(_ group: [Permission], granted: LocationAccuracy?) -> [LocationAccuracy] {
        guard group.contains(.location) else { return [] }
        return LocationAccuracy.allCases.filter { $0 < (granted ?? .exact) }.reversed()
    }

    /// The program's file name an answer names too, when the grant is bound to it (a run's
    /// request); nil for a user's request.
    public static func boundProgram(_ program: String?, startedByRun: Bool) -> String? {
        guard startedByRun, let name = program?.split(separator: "/").last else { return nil }
        return String(name)
    }

    /// The password prompt's text: the question, why a password is asked (`instead`: why
    /// not a choice), which attempt this is and the back-off the next check waits for.
    public static func passwordText(_ question: String, user: String, term: String?, instead: String?, attempt: Int64,
                                    attempts: Int64, backoff: (wait: Duration, failures: Int)) -> String {
        var text = question
        if let instead {
            text += "\ndevaccessd cannot ask you where only you can answer (\(instead)), so it takes your "
                + "password instead of a yes: type it to allow \(term ?? "this")"
        } else {
            text += "\nPolicy asks \(user) to confirm with their password"
        }
        text += attempt > 1 ? " (the last one was wrong; attempt \(attempt) of \(attempts))." : "."
        if backoff.wait > .zero {
            text += "\nAfter \(backoff.failures) wrong password\(backoff.failures == 1 ? "" : "s") devaccessd checks "
                + "the next one no sooner than in \(wholeSeconds(backoff.wait)) s."
        }
        return text
    }

    /// The terms a password allows `group` for: the request's, under each permission's
    /// policy; and their one text when they read the same.
    public static func passwordTerms(_ group: [Permission], scope: GrantTerm?, holder: String?, shell: Bool = false,
                                     policies: (Permission) -> PolicyDecision) -> (terms: [ResolvedTerm], text: String?) {
        let terms = group.map { policies($0).term(scope) }
        let texts = terms.map { $0.text(holder: holder, shell: shell) }
        return (terms, Set(texts).count == 1 ? texts.first : nil)
    }

    /// A password accepted: `group` allowed for its `terms`, decided by the user.
    public static func passwordAccepted(_ group: [Permission], terms: [ResolvedTerm],
                                        subject: Principal) -> [GrantPlan] {
        zip(group, terms).map { permission, term in
            GrantPlan(permission: permission, decision: .allow, term: term, method: .authSelf, decidedBy: subject)
        }
    }

    /// A wait in whole seconds, rounded up: "no sooner than in 3 s" is never early.
    public static func wholeSeconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds + (attoseconds > 0 ? 1 : 0)
    }
}
