import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger

/// Who may do what, in one table (USBGuard's section x privilege, reduced to the two
/// classes devaccess has): anyone acts for themselves; root and members of the admin
/// group act for others and on the whole system.
public enum Operation: String, Sendable, CaseIterable {
    case hello
    case statusOfSelf = "status"
    case statusOfOthers = "status for another user"
    case requestForSelf = "request"
    case listPending = "pending"
    case approve
    case reject
    // decide, revoke, reset, list, reconcile, withdraw, audit-verify and audit-archive are decided by
    // `EngineService` (DevAccessInterface), which devaccessd and `--offline` share.

    public enum Privilege: Sendable {
        case anyone
        case admin
    }

    public var privilege: Privilege {
        switch self {
        case .hello, .statusOfSelf, .requestForSelf: return .anyone
        case .statusOfOthers, .listPending, .approve, .reject:
            return .admin
        }
    }
}

public struct AccessRules: Sendable {
    public var adminGroup: String

    public init(adminGroup: String = "devaccess-admin") {
        self.adminGroup = adminGroup
    }

    /// Root, or a process whose credentials (SO_PEERCRED gid, SO_PEERGROUPS) hold the
    /// admin group **and** whose user is still a member as a fresh login sees it (NSS).
    /// The group is looked up on every call, so one created while the broker runs counts
    /// at once; a session started before its user joined the group does not hold it,
    /// exactly as the kernel sees that session; and a session started before its user was
    /// removed from the group (`gpasswd -d`, `usermod -G`) still holds the gid but is no
    /// administrator any more: the credentials alone would keep an ex-administrator's
    /// tmux or background process approving and granting for as long as it runs. A uid
    /// with no passwd entry (a subordinate uid) is never an administrator. NSS is asked
    /// only for a process that holds the gid.
    public func isAdmin(_ peer: Peer) -> Bool {
        if peer.uid == 0 { return true }
        guard let gid = UserDatabase.groupID(adminGroup), peer.isMember(of: gid) else { return false }
        guard let user = try? UserDatabase.identity(uid: peer.uid) else { return false }
        return user.isMember(of: gid)
    }

    public func allows(_ operation: Operation, for peer: Peer) -> Bool {
        switch operation.privilege {
        case .anyone: return true
        case .admin: return isAdmin(peer)
        }
    }
}

// MARK: - The judge: (action, caller, target) -> verdict

/// The run a caller belongs to, as the ledger recorded it: found by the run's group id among
/// the groups the kernel stamped on the caller's connection (`SO_PEERGROUPS`), never by the
/// process tree (a double-forked descendant leaves the tree and keeps the group).
public struct RunScope: Sendable, Hashable {
    /// The run's id; 0 when the caller holds a run group id the ledger has no run for.
    public var id: Int64
    public var gid: UInt32
    public var strict: Bool
    /// What the run was given.
    public var permissions: [Permission]
    public var program: Program
    /// The location level the run holds now (its grant, capped by policy); nil: none.
    public var accuracy: LocationAccuracy?

    public init(id: Int64, gid: UInt32, strict: Bool, permissions: [Permission], program: Program,
                accuracy: LocationAccuracy? = nil) {
        self.id = id
        self.gid = gid
        self.strict = strict
        self.permissions = permissions
        self.program = program
        self.accuracy = accuracy
    }

    public init(_ run: Run) {
        self.init(id: run.id, gid: run.gid, strict: run.strict, permissions: run.permissions, program: run.program)
    }

    /// A run group id with no recorded run (a ledger reset under a leftover process): judged
    /// as a strict run that was given nothing, so nothing unknown widens.
    public static func unrecorded(gid: UInt32) -> RunScope {
        RunScope(id: 0, gid: gid, strict: true, permissions: [], program: Program(path: "(a run devaccessd has no record of)"))
    }

    var described: String {
        let given = permissions.isEmpty ? "nothing" : permissions.map(\.rawValue).joined(separator: " and ")
        return (strict ? "a strict run" : "a run") + " of \(program.path) (run \(id)), which was given \(given)"
    }
}

/// Who asks, from the kernel only: the uid, whether it stands as root, an administrator or
/// a subordinate uid, and the run whose group id its credentials carry.
public struct KernelCaller: Sendable, Hashable {
    public enum Standing: Sendable, Hashable {
        case root
        /// A member of the admin group, by its credentials and by NSS (`AccessRules.isAdmin`).
        case admin
        case user
        /// A uid of /etc/subuid: a user namespace of another user's.
        case subordinate
    }

    /// The kinds of callers the authorization matrix is written for.
    public enum Kind: String, Sendable, CaseIterable {
        case root, admin, user, subordinate
        case inRun = "process in a run"
        case inStrictRun = "process in a strict run"
    }

    public var uid: UInt32
    public var standing: Standing
    public var run: RunScope?

    public init(uid: UInt32, standing: Standing, run: RunScope? = nil) {
        self.uid = uid
        self.standing = standing
        self.run = run
    }

    public var kind: Kind {
        if let run { return run.strict ? .inStrictRun : .inRun }
        switch standing {
        case .root: return .root
        case .admin: return .admin
        case .user: return .user
        case .subordinate: return .subordinate
        }
    }

    /// Root or an administrator, and not confined to a strict run.
    var administers: Bool {
        (standing == .root || standing == .admin) && run?.strict != true
    }
}

extension AccessRules {
    /// What a caller asks devaccessd to do, as far as the judge needs to know.
    public enum Action: Sendable, Hashable {
        case status
        /// A request for the caller itself; `accuracy`: the location level asked.
        case request([Permission], accuracy: LocationAccuracy?)
        /// devaccessd opening a node of a device of `permission` and passing the descriptor.
        case open(Permission)
        /// `devaccess run`: a program started with these permissions.
        case run([Permission], strict: Bool)
        /// The position, at `accuracy` (nil: at the caller's level).
        case location(LocationAccuracy?)
        /// The approval queue and decisions for others: pending, approve, reject.
        case administer
    }

    /// Whose is the thing acted on.
    public enum Target: Sendable, Hashable {
        case itself
        case anotherUser
    }

    /// The judge's answer.
    public enum Verdict: Sendable, Hashable {
        case allowed
        /// Allowed as far as the run reaches: its permissions, its location level. The handler
        /// serves no more than the scope gives.
        case withinRun(RunScope)
        /// Allowed, and judged as the run's program (its `Program=` rules), not as the user at large.
        case asProgram(RunScope)
        case refused(String)

        public var isRefused: Bool {
            if case .refused = self { return true }
            return false
        }
    }

    /// The one authorization table: a pure function of what is asked, who asks and for whom.
    /// Grants, policy and devices are judged after it, by the operation (a user's own grant
    /// opens a node; the policy decides a request): this table says who may ask at all and
    /// how far a run reaches.
    public static func judge(_ action: Action, caller: KernelCaller, target: Target = .itself) -> Verdict {
        if target == .anotherUser {
            return caller.administers ? .allowed : .refused(othersRefusal(caller))
        }
        guard let run = caller.run else {
            if action == .administer, !caller.administers { return .refused(othersRefusal(caller)) }
            return .allowed
        }
        return run.strict ? judgeStrict(action, caller: caller, run: run) : judgeRun(action, caller: caller, run: run)
    }

    /// A strict run gets only what it was given: devaccessd is no way around its Landlock rules.
    private static func judgeStrict(_ action: Action, caller: KernelCaller, run: RunScope) -> Verdict {
        switch action {
        case .status:
            return .allowed
        case .open(let permission):
            return run.permissions.contains(permission) ? .withinRun(run)
                : .refused("the caller is in \(run.described); it may not have devaccessd open \(permission.rawValue) "
                    + "(--strict); nothing was opened")
        case .run:
            return .refused("the caller is in \(run.described); a run started from a strict run would not be "
                + "confined by it, so devaccessd starts none (--strict); nothing was run")
        case .location(let asked):
            guard run.permissions.contains(.location), let level = run.accuracy else {
                return .refused("the caller is in \(run.described); it was given no location (--strict)")
            }
            if let asked, asked > level {
                return .refused("the caller is in \(run.described); its location is at \(level) accuracy, not \(asked) "
                    + "(--strict)")
            }
            return .withinRun(run)
        case .request(let permissions, let accuracy):
            if let more = permissions.first(where: { !run.permissions.contains($0) }) {
                return .refused("the caller is in \(run.described); a request from it cannot add \(more.rawValue) "
                    + "(--strict); nothing was asked or recorded")
            }
            if permissions.contains(.location), let accuracy, accuracy > (run.accuracy ?? .country) {
                return .refused("the caller is in \(run.described); a request from it cannot raise its location level "
                    + "(--strict); nothing was asked or recorded")
            }
            return .withinRun(run)
        case .administer:
            return .refused(othersRefusal(caller))
        }
    }

    /// A run without --strict is its user's program: it may do what its user may, and its
    /// requests are its program's (the run's, not the process that connected).
    private static func judgeRun(_ action: Action, caller: KernelCaller, run: RunScope) -> Verdict {
        switch action {
        case .request: return .asProgram(run)
        case .administer: return caller.administers ? .allowed : .refused(othersRefusal(caller))
        case .status, .open, .run, .location: return .allowed
        }
    }

    private static func othersRefusal(_ caller: KernelCaller) -> String {
        if let run = caller.run, run.strict {
            return "the caller is in \(run.described); a strict run acts for itself only, never as an administrator"
        }
        return "only root and members of the admin group may act for other users or on the approval queue"
    }
}
