/// What policy says happens when a subject asks for a permission.
public enum PolicyAction: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Granted without asking.
    case allow
    /// Forbidden: the status is `restricted` and no request can change it.
    case deny
    /// The requesting user confirms at their own terminal.
    case ask
    /// The requesting user proves presence with their password (PAM).
    case authSelf = "auth_self"
    /// Queued until an administrator approves.
    case authAdmin = "auth_admin"

    public var description: String { rawValue }
}

/// Where a setting came from, for error messages and reasons: `file:line`.
public struct PolicyOrigin: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public init(file: String, line: Int) {
        self.file = file
        self.line = line
    }
    public var description: String { "\(file):\(line)" }
}

/// The per-permission default: `[camera]` `Default=ask` `MaxDuration=8h` `Keep=15m`.
public struct PermissionPolicy: Sendable, Hashable {
    public var action: PolicyAction
    /// Longest grant policy allows; nil = no limit (`always` allowed).
    public var maxDurationSeconds: Int64?
    /// How long an answer to ask/auth_self/auth_admin is kept when the request names no scope.
    public var keepSeconds: Int64?
    /// `[location]` only: the finest accuracy any location grant gives (`MaxAccuracy=`).
    public var maxAccuracy: LocationAccuracy?
    public var origin: PolicyOrigin?

    public init(action: PolicyAction, maxDurationSeconds: Int64? = nil, keepSeconds: Int64? = nil,
                maxAccuracy: LocationAccuracy? = nil, origin: PolicyOrigin? = nil) {
        self.action = action
        self.maxDurationSeconds = maxDurationSeconds
        self.keepSeconds = keepSeconds
        self.maxAccuracy = maxAccuracy
        self.origin = origin
    }

    /// Used for a permission the configuration does not mention.
    public static let builtIn = PermissionPolicy(action: .ask)
}

/// A `[Rule]` section: who it is for, and what happens.
public struct PolicyRule: Sendable, Hashable {
    /// Empty = every permission.
    public var permissions: Set<Permission>
    /// User names or decimal uids; empty = any user. Any one matching is enough.
    public var users: [String]
    /// Group names or decimal gids; empty = any.
    public var groups: [String]
    /// Canonical executable paths; empty = any program (and requests with no program).
    public var programs: [String]
    public var action: PolicyAction
    public var maxDurationSeconds: Int64?
    public var keepSeconds: Int64?
    /// `MaxAccuracy=`: caps the location grants of every user the rule matches, whichever
    /// rule decides the action (see `Policy.decision`).
    public var maxAccuracy: LocationAccuracy?
    public var origin: PolicyOrigin

    public init(permissions: Set<Permission> = [], users: [String] = [], groups: [String] = [],
                programs: [String] = [], action: PolicyAction, maxDurationSeconds: Int64? = nil,
                keepSeconds: Int64? = nil, maxAccuracy: LocationAccuracy? = nil, origin: PolicyOrigin) {
        self.permissions = permissions
        self.users = users
        self.groups = groups
        self.programs = programs
        self.action = action
        self.maxDurationSeconds = maxDurationSeconds
        self.keepSeconds = keepSeconds
        self.maxAccuracy = maxAccuracy
        self.origin = origin
    }

    /// Every criterion present must match (AND); within one, any value matches (OR).
    public func matches(_ permission: Permission, user: UserIdentity, program: String?) -> Bool {
        if !permissions.isEmpty && !permissions.contains(permission) { return false }
        if !users.isEmpty && !users.contains(where: { $0 == user.name || $0 == String(user.uid) }) { return false }
        if !groups.isEmpty && !groups.contains(where: { wanted in
            user.groups.contains { $0.name == wanted || String($0.gid) == wanted }
        }) { return false }
        if !programs.isEmpty {
            guard let program, programs.contains(program) else { return false }
        }
        return true
    }
}

/// A `[Program]` section: the permissions a program is run with by default. It asks for
/// them; whether they are given is still the policy's and the person's decision.
public struct ProgramDeclaration: Sendable, Hashable {
    public var path: String
    public var permissions: [Permission]
    public var origin: PolicyOrigin

    public init(path: String, permissions: [Permission], origin: PolicyOrigin) {
        self.path = path
        self.permissions = permissions
        self.origin = origin
    }
}

/// The decision policy gives for one subject and permission, and why.
public struct PolicyDecision: Sendable, Hashable {
    public var action: PolicyAction
    public var maxDurationSeconds: Int64?
    public var keepSeconds: Int64?
    /// nil when no file said anything (the built-in default).
    public var origin: PolicyOrigin?
    /// Location only: the coarsest `MaxAccuracy=` of the `[location]` section and of every
    /// matching rule, and where it is set; nil: no cap (exact).
    public var accuracyCap: AccuracyCap?

    /// A policy's `MaxAccuracy=` in force for a user.
    public struct AccuracyCap: Sendable, Hashable, CustomStringConvertible {
        public var level: LocationAccuracy
        public var origin: PolicyOrigin?

        public init(level: LocationAccuracy, origin: PolicyOrigin?) {
            self.level = level
            self.origin = origin
        }

        /// "MaxAccuracy=city (/etc/devaccess/devaccess.conf:12)".
        public var description: String {
            "MaxAccuracy=\(level.rawValue)" + (origin.map { " (\($0))" } ?? "")
        }
    }

    public init(action: PolicyAction, maxDurationSeconds: Int64? = nil, keepSeconds: Int64? = nil,
                origin: PolicyOrigin? = nil, accuracyCap: AccuracyCap? = nil) {
        self.action = action
        self.maxDurationSeconds = maxDurationSeconds
        self.keepSeconds = keepSeconds
        self.origin = origin
        self.accuracyCap = accuracyCap
    }

    /// `level` as the policy lets it be granted: never finer than the cap.
    public func capping(_ level: LocationAccuracy) -> LocationAccuracy {
        accuracyCap.map { min($0.level, level) } ?? level
    }

    /// The sentence for status reasons.
    public func explanation(_ permission: Permission, user: UserIdentity) -> String {
        let place = origin.map { " (\($0))" } ?? " (built-in default)"
        switch action {
        case .deny: return "policy forbids \(permission.rawValue) for \(user.name)\(place)"
        case .allow: return "policy allows \(permission.rawValue) for \(user.name) without asking\(place)"
        case .ask: return "policy: \(user.name) is asked to confirm\(place)"
        case .authSelf: return "policy: \(user.name) must enter their password\(place)"
        case .authAdmin: return "policy: an administrator must approve\(place)"
        }
    }
}

/// Defaults per permission plus rules; the last matching rule wins, so drop-ins
/// (read after the main file, in name order) override it, as in systemd.
public struct Policy: Sendable, Hashable {
    public var defaults: [Permission: PermissionPolicy]
    public var rules: [PolicyRule]
    /// `[Program]` sections: what `devaccess run PATH` asks for when the command names
    /// nothing, by program path (the last section for a path wins).
    public var programs: [String: ProgramDeclaration]

    public init(defaults: [Permission: PermissionPolicy] = [:], rules: [PolicyRule] = [],
                programs: [String: ProgramDeclaration] = [:]) {
        self.defaults = defaults
        self.rules = rules
        self.programs = programs
    }

    public func decision(for permission: Permission, user: UserIdentity, program: String? = nil) -> PolicyDecision {
        let cap = accuracyCap(for: permission, user: user, program: program)
        if let rule = rules.last(where: { $0.matches(permission, user: user, program: program) }) {
            let fallback = defaults[permission]
            return PolicyDecision(action: rule.action,
                                  maxDurationSeconds: rule.maxDurationSeconds ?? fallback?.maxDurationSeconds,
                                  keepSeconds: rule.keepSeconds ?? fallback?.keepSeconds, origin: rule.origin,
                                  accuracyCap: cap)
        }
        let base = defaults[permission] ?? .builtIn
        return PolicyDecision(action: base.action, maxDurationSeconds: base.maxDurationSeconds,
                              keepSeconds: base.keepSeconds, origin: base.origin, accuracyCap: cap)
    }

    /// Every `MaxAccuracy=` that applies caps: unlike the action, which the last matching
    /// rule decides, the coarsest of the `[location]` section's and of every matching rule's
    /// holds, so a later rule that allows location does not lift a cap an earlier rule set.
    func accuracyCap(for permission: Permission, user: UserIdentity, program: String?) -> PolicyDecision.AccuracyCap? {
        guard permission == .location else { return nil }
        var caps: [PolicyDecision.AccuracyCap] = []
        if let base = defaults[.location], let level = base.maxAccuracy {
            caps.append(PolicyDecision.AccuracyCap(level: level, origin: base.origin))
        }
        for rule in rules where rule.maxAccuracy != nil && rule.matches(permission, user: user, program: program) {
            if let level = rule.maxAccuracy { caps.append(PolicyDecision.AccuracyCap(level: level, origin: rule.origin)) }
        }
        // The coarsest; of equal ones the first, so the reason names where it was first set.
        return caps.min { $0.level < $1.level }
    }

    /// The decision for a request `program` makes. A `Program=` rule decides for that
    /// program, but cannot give more than the user may have: a device's access list names
    /// users, not programs, so what one program of the user is allowed, every program of
    /// the user can use; where the policy denies the permission to the user whatever the
    /// program, that denial stands (and the grant would be ended at once anyway).
    public func requestDecision(for permission: Permission, user: UserIdentity, program: String?) -> PolicyDecision {
        let named = decision(for: permission, user: user, program: program)
        guard program != nil, named.action != .deny else { return named }
        let anyProgram = decision(for: permission, user: user, program: nil)
        return anyProgram.action == .deny ? anyProgram : named
    }

    /// The status input: a `deny` decision makes the permission `restricted`.
    public func restriction(for permission: Permission, user: UserIdentity, program: String? = nil) -> Reason? {
        let decision = decision(for: permission, user: user, program: program)
        guard decision.action == .deny else { return nil }
        return Reason(.policy, decision.explanation(permission, user: user))
    }
}
