import DevAccessCore
import DevAccessLedger
import DevAccessSystem

/// A grant the policy ended, and why (the rule's sentence, its `file:line`).
public struct PolicyEnded: Sendable, Hashable {
    public var grant: Grant
    public var reason: String
    public var rule: String?

    public init(grant: Grant, reason: String, rule: String?) {
        self.grant = grant
        self.reason = reason
        self.rule = rule
    }
}

/// The policy in the engine: a `deny` ends devaccess's own grants at the next run, and
/// access the nodes still give (groups, owner, other bits, foreign entries) is drift.
extension Enforcer {
    /// The policy now, when it parses; nil when the engine applies none or it does not
    /// parse (then `problem` says why, for the report's notes).
    func policyInForce() -> (policy: Policy?, problem: String?) {
        switch policy() {
        case nil: return (nil, nil)
        case .loaded(let policy)?: return (policy, nil)
        case .unreadable(let problem)?: return (nil, problem)
        }
    }

    /// The user as a login has them; a deleted account keeps its uid and recorded name.
    func identity(_ subject: Principal) -> UserIdentity {
        identities(subject.uid) ?? UserIdentity(uid: subject.uid, name: subject.name, primaryGID: UInt32.max, groups: [])
    }

    /// Why the policy forbids `permission` to `subject` (any program), or nil.
    func policyForbids(_ subject: Principal, _ permission: Permission) -> String? {
        guard let policy = policyInForce().policy else { return nil }
        return policy.restriction(for: permission, user: identity(subject))?.message
    }

    /// Ends the standing allow grants (of the users in `scope`; nil: everyone's) the policy
    /// forbids now, recording each as ended by policy. Fail closed: when the ledger cannot
    /// record it, their entries are removed anyway.
    func endGrantsPolicyForbids(_ policy: Policy, of scope: Set<UInt32>?,
                                _ report: inout EnforcementReport) throws(LedgerError) {
        var users: [UInt32: UserIdentity] = [:]
        var endings: [Ledger.PolicyEnding] = []
        var why: [Int64: Ledger.PolicyEnding] = [:]
        var forbidden: [Grant] = []
        for grant in try ledger.grants(now: clock())
        where grant.decision == .allow && scope.map({ $0.contains(grant.subject.uid) }) ?? true {
            let user = users[grant.subject.uid] ?? identity(grant.subject)
            users[grant.subject.uid] = user
            let ending: Ledger.PolicyEnding
            if user.name != grant.subject.name {
                // The account the grant was for is gone and its uid names another user now
                // (useradd hands out the highest uid + 1 again): a grant is a person's, and
                // that person is not the one who has the uid now. (A renamed account ends
                // its grants too: its user asks again.)
                ending = Ledger.PolicyEnding(grantID: grant.id, reason: "uid \(grant.subject.uid) is \(user.name)'s now, "
                                                 + "and the grant was \(grant.subject.name)'s", rule: nil)
            } else {
                let decision = policy.decision(for: grant.permission, user: user, program: grant.program?.path)
                guard decision.action == .deny else { continue }
                ending = Ledger.PolicyEnding(grantID: grant.id, reason: decision.explanation(grant.permission, user: user),
                                             rule: decision.origin?.description)
            }
            endings.append(ending)
            why[grant.id] = ending
            forbidden.append(grant)
        }
        guard !endings.isEmpty else { return }
        do {
            let ended = try ledger.endByPolicy(endings, by: actor, at: clock())
            report.endedByPolicy += ended.compactMap { grant in
                why[grant.id].map { PolicyEnded(grant: grant, reason: $0.reason, rule: $0.rule) }
            }
        } catch {
            removeEntriesFailingClosed(of: forbidden)
            throw error
        }
    }

    /// Users whose remaining access the policy may forbid: the nodes' owners, members of
    /// their owning and named groups, named users, and users a `deny` rule names. Only for
    /// permissions some rule or default denies.
    func policySubjects(_ policy: Policy, _ reports: [AdapterReport]) -> Set<UInt32> {
        var uids = Set<UInt32>()
        var groups = Set<UInt32>()
        for report in reports where policy.mayDeny(report.permission) {
            for rule in policy.rules where rule.action == .deny
                && (rule.permissions.isEmpty || rule.permissions.contains(report.permission)) {
                for name in rule.users {
                    if let user = try? UserDatabase.identity(for: name) { uids.insert(user.uid) }
                }
                for name in rule.groups {
                    if let gid = UInt32(name) ?? UserDatabase.groupID(name) { groups.insert(gid) }
                }
            }
            for node in report.devices.flatMap(\.nodes) {
                guard let facts = node.facts else { continue }
                uids.insert(facts.ownerUID)
                groups.insert(facts.groupGID)
                for entry in facts.acl ?? [] {
                    switch entry.tag {
                    case .user(let uid): uids.insert(uid)
                    case .group(let gid): groups.insert(gid)
                    default: break
                    }
                }
            }
        }
        for gid in groups {
            for member in UserDatabase.members(ofGroup: gid) { uids.insert(member) }
        }
        uids.remove(0)
        return uids
    }
}

extension Policy {
    /// Whether any default or rule could deny `permission` to someone.
    public func mayDeny(_ permission: Permission) -> Bool {
        (defaults[permission] ?? .builtIn).action == .deny
            || rules.contains { $0.action == .deny && ($0.permissions.isEmpty || $0.permissions.contains(permission)) }
    }
}
