import FoundationEssentials
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// What a run's permissions come to before anyone is asked, built from the order and what
/// devaccessd read (policy, ledger, statuses) and consumed by `run`: each permission is
/// answered at once, allowed by policy, asked (`ask`) or confirmed with a password
/// (`auth_self`). Pure: a test builds one without a daemon.
public struct RunPlan: Sendable {
    /// Answered: at once (refused, unavailable, already decided), or after asking.
    public var results: [Permission: RequestResult] = [:]
    /// Decisions to record: policy's allows, then what a person decided.
    public var grants: [GrantPlan] = []
    public var toAsk: [Permission] = []
    public var toConfirm: [Permission] = []
    /// With location among the permissions: the level asked and what the policy lets it have.
    public var location: LocationAsk?

    /// What one permission of the run comes to before anyone is asked.
    enum Step: Sendable {
        case answered(RequestResult)
        case allow(GrantPlan)
        case ask
        case confirm
    }

    /// Who runs what: the values every permission's step reads.
    public struct Subject: Sendable {
        public var user: UserIdentity
        /// The program's identity (its SHA-256 when the file is not root's alone).
        public var program: Program
        /// Whether only root can change the program's file.
        public var trusted: Bool
        /// The term the order names (nil: `once`).
        public var scope: GrantTerm?
        /// Who a policy allow is decided by.
        public var broker: Principal

        public init(user: UserIdentity, program: Program, trusted: Bool, scope: GrantTerm?, broker: Principal) {
            self.user = user
            self.program = program
            self.trusted = trusted
            self.scope = scope
            self.broker = broker
        }
    }

    public init(_ permissions: [Permission], statuses: [PermissionStatus], subject: Subject,
                accuracy: LocationAccuracy?, grants: [Grant], switchedOff: (Permission) -> PrivacySwitch?, policies: (Permission) -> PolicyDecision) {
        // Location is given at a level, as a request's: asked (exact unless --accuracy), under the policy's cap.
        location = permissions.contains(.location)
            ? LocationAsk(asked: accuracy ?? .exact, policy: policies(.location)) : nil
        let standing = Self.standing(grants, uid: subject.user.uid, trusted: subject.trusted)
        for (permission, status) in zip(permissions, statuses) {
            let grant = standing.decision(uid: subject.user.uid, program: subject.program, process: nil,
                                          permission: permission, deviceID: nil)
            switch Self.step(permission, status: status, policy: policies(permission), off: switchedOff(permission),
                             standing: grant, location: location, subject: subject) {
            case .answered(let result): results[permission] = result
            case .allow(let plan): self.grants.append(plan)
            case .ask: toAsk.append(permission)
            case .confirm: toConfirm.append(permission)
            }
        }
    }

    /// A program grant names a path: it stands for code only where only root can change the
    /// file. A program its user can change (or swap at its path between devaccessd's checks
    /// and the exec) is decided for each run; only the user's own decisions apply to it.
    static func standing(_ grants: [Grant], uid: UInt32, trusted: Bool) -> RunDecisions {
        RunDecisions(active: grants.filter { grant in grant.subject.uid == uid && (trusted || grant.program == nil) })
    }

    /// One permission: a switch that is off, a policy deny, no device, a standing decision or
    /// access the user has already answer it; else the policy's action says who decides.
    static func step(_ permission: Permission, status: PermissionStatus, policy: PolicyDecision, off: PrivacySwitch?,
                     standing: Grant?, location: LocationAsk?, subject: Subject) -> Step {
        let user = subject.user
        if let off {
            return .answered(RequestResult(permission: permission, outcome: .restricted,
                message: "\(permission.rawValue) is " + off.sentence(formatTime: ISOTime.format)
                    + "; a run cannot change that; nothing was asked or run"))
        }
        if policy.action == .deny {
            return .answered(RequestResult(permission: permission, outcome: .restricted,
                message: policy.explanation(permission, user: user) + "; a run cannot change that"))
        }
        if status.status == .unavailable {
            return .answered(RequestResult(permission: permission, outcome: .unavailable,
                message: "no \(permission.rawValue) is present; nothing was asked or run"))
        }
        if let standing, !decidedAgain(standing, permission, location: location) {
            return .answered(answered(by: standing))
        }
        if status.status == .authorized {
            return .answered(RequestResult(permission: permission, outcome: .alreadyAllowed,
                message: "\(user.name) can already use every \(permission.rawValue) device; the program gets "
                    + "that access as any of \(user.name)'s programs does"))
        }
        switch policy.action {
        case .allow:
            return .allow(GrantPlan(permission: permission, decision: .allow, term: policy.term(subject.scope ?? .once),
                                    method: .policy, decidedBy: subject.broker))
        case .ask: return .ask
        case .authSelf: return .confirm
        case .authAdmin, .deny: // .deny was answered above
            return .answered(RequestResult(permission: permission, outcome: .restricted,
                message: "policy wants an administrator to decide \(permission.rawValue) for \(user.name); a run "
                    + "does not wait for one: ask them for 'devaccess grant \(permission.rawValue) --user "
                    + "\(user.name) --program \(subject.program.path)'"))
        }
    }

    /// A location allow coarser than this run would get is decided again.
    static func decidedAgain(_ grant: Grant, _ permission: Permission, location: LocationAsk?) -> Bool {
        grant.decision == .allow && permission == .location
            && (grant.locationLevel ?? .exact) < (location?.granted ?? .exact)
    }

    /// The result a standing decision for the program gives.
    static func answered(by grant: Grant) -> RequestResult {
        var result = RequestResult(for: grant, outcome: grant.decision == .allow ? .alreadyAllowed : .alreadyDenied,
                                   term: nil)
        result.message = (grant.decision == .allow ? "already allowed: " : "denied by an earlier decision: ")
            + Decisions.describe(grant)
        return result
    }

    /// Whether somebody is asked (a choice or a password).
    public var asksSomeone: Bool { !toAsk.isEmpty || !toConfirm.isEmpty }

    /// Refused without asking anyone or changing anything: an attempt a user can repeat at will.
    public var refusedAtOnce: Bool {
        !asksSomeone && grants.isEmpty
            && results.values.contains { [.alreadyDenied, .restricted, .unavailable].contains($0.outcome) }
    }

    /// The run does not start: a person denied something, or a permission was refused or left undecided.
    public var notStarting: Bool {
        let refused: Set<RequestOutcome> = [.denied, .alreadyDenied, .restricted, .unavailable, .undecided]
        return grants.contains { $0.decision == .deny } || results.values.contains { refused.contains($0.outcome) }
    }

    /// `permissions` no decision was reached for, undecided for `why`.
    public mutating func leave(_ permissions: [Permission], undecided why: UndecidedReason) {
        for permission in permissions { results[permission] = RequestResult.undecided(permission, why) }
    }

    /// A run that does not start: each allow no result names yet is left unrecorded. The wire
    /// wants a why with every undecided: nothing was recorded, as for a dismissed prompt (the
    /// message says why).
    public func withAllowsUnrecorded() -> [Permission: RequestResult] {
        var results = self.results
        for plan in grants where plan.decision == .allow && results[plan.permission] == nil {
            results[plan.permission] = RequestResult(permission: plan.permission, outcome: .undecided, why: .dismissed,
                message: "allowed, but not recorded: the run does not start without every permission it asked for")
        }
        return results
    }

    /// The allows a run records: a program its user can change gets this run only, whatever
    /// term was chosen, and never longer than that term or MaxDuration= (the run's `once`
    /// ends by then).
    public func runAllows(trusted: Bool) -> [GrantPlan] {
        let allows = grants.filter { $0.decision == .allow }
        guard !trusted else { return allows }
        return allows.map { plan in
            var once = plan
            once.term = ResolvedTerm(.once, cap: Self.runLimit(plan.term))
            return once
        }
    }

    /// The permissions the run asks for: as the order names them, else as a [Program] section
    /// of the policy declares them for the program (`declared`); only those a run can be given.
    public static func permissions(_ ordered: [Permission], declared: [Permission]?,
                            program: String) -> Result<[Permission], ProtocolError> {
        var permissions = ordered
        if permissions.isEmpty {
            guard let declared else {
                return .failure(ProtocolError(.badMessage, context: "$.permissions",
                    reason: "name what the program gets (--camera, --microphone): no [Program] section of the "
                        + "policy declares \(program); nothing was run"))
            }
            permissions = declared
        }
        if let unsupported = permissions.first(where: { !runPermissions.contains($0) }) {
            return .failure(ProtocolError(.badMessage, context: "$.permissions",
                reason: "a run can be given the camera, the microphone and location; not \(unsupported.rawValue); "
                    + "nothing was run"))
        }
        return .success(permissions)
    }

    /// The `received` audit event's details.
    public func receivedDetails(program: String) -> [String: String] {
        var received = ["run": "true", "program": program]
        if let location {
            received["accuracy"] = location.asked.rawValue
            if location.cappedBy != nil { received["accuracy_granted"] = location.granted.rawValue }
        }
        return received
    }

    /// The `run_start` event's details: what the caller's environment lost, each permission's outcome.
    public func startDetails(removedEnvironment: [String]) -> [String: String] {
        var details = ["removed_environment": removedEnvironment.joined(separator: " ")]
        for (permission, result) in results { details["\(permission.rawValue)_outcome"] = result.outcome.rawValue }
        return details
    }

    /// What a run can be given.
    public static let runPermissions: [Permission] = [.camera, .microphone, .location]

    /// The longest a run-only grant may last under `term`: a `for` term's own length, else
    /// the policy's cap (MaxDuration=); nil: while the run lasts.
    public static func runLimit(_ term: ResolvedTerm) -> Int64? {
        switch term.term {
        case .duration(let seconds): return min(seconds, term.cap ?? seconds)
        case .once, .always: return term.cap
        }
    }
}
