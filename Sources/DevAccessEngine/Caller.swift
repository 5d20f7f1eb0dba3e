import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger

/// Who asks, from the kernel only (SO_PEERCRED and SO_PEERGROUPS for devaccessd's peers,
/// the process's own credentials for the CLI without devaccessd): the user, whether it
/// stands as root, an administrator or a subordinate uid, and the run whose group id its
/// credentials carry. Never from a message.
public struct Caller: Sendable, Hashable {
    public enum Standing: Sendable, Hashable {
        case root
        /// A member of the admin group, by its credentials and by NSS (`Caller.identified`).
        case admin
        case user
        /// A uid of /etc/subuid: a user namespace of another user's.
        case subordinate

        /// Root and administrators; not held to per-user limits and budgets unless confined
        /// to a strict run (`Caller.isUnlimited`).
        public var isUnlimited: Bool {
            self == .root || self == .admin
        }
    }

    /// The kinds of callers the authorization matrix is written for.
    public enum Kind: String, Sendable, CaseIterable {
        case root, admin, user, subordinate
        case inRun = "process in a run"
        case inStrictRun = "process in a strict run"
    }

    /// The credentials the kernel stamped on a connection or a process.
    public struct Credentials: Sendable, Hashable {
        public var uid: UInt32
        public var gid: UInt32
        public var groups: [UInt32]

        public init(uid: UInt32, gid: UInt32, groups: [UInt32]) {
            self.uid = uid
            self.gid = gid
            self.groups = groups
        }

        /// This process's real credentials.
        public static func ofThisProcess() -> Credentials {
            var groups = [gid_t](repeating: 0, count: Int(max(getgroups(0, nil), 0)))
            let got = groups.isEmpty ? 0 : getgroups(CInt(groups.count), &groups)
            return Credentials(uid: getuid(), gid: getgid(), groups: Array(groups.prefix(Int(max(got, 0)))))
        }

        func holds(_ gid: UInt32) -> Bool {
            self.gid == gid || groups.contains(gid)
        }
    }

    public var principal: Principal
    public var standing: Standing
    public var run: RunScope?
    /// The admin group's name, for refusals' sentences.
    public var adminGroup: String

    public init(principal: Principal, standing: Standing, run: RunScope? = nil, adminGroup: String = AdminGroup.name) {
        self.principal = principal
        self.standing = standing
        self.run = run
        self.adminGroup = adminGroup
    }

    public var uid: UInt32 { principal.uid }

    public var kind: Kind {
        if let run { return run.strict ? .inStrictRun : .inRun }
        switch standing {
        case .root: return .root
        case .admin: return .admin
        case .user: return .user
        case .subordinate: return .subordinate
        }
    }

    /// Root or an administrator, and not confined to a strict run: not held to per-user
    /// limits and budgets. A strict run of an administrator's is: it runs a program its user
    /// does not trust, which took every connection, the slots kept for administrators
    /// included (hostile review 5).
    public var isUnlimited: Bool {
        standing.isUnlimited && run?.strict != true
    }

    /// The judge's one test for acting on others and on the whole system: the same callers.
    var administers: Bool { isUnlimited }
}

extension Caller {
    /// The caller the kernel's `credentials` describe: its standing (`standing(of:adminGroup:)`)
    /// and the run of the first run group id among its groups (with several, a strict one).
    /// `runs` names the ledger's run of a group id; a run group id it cannot name is judged
    /// as a strict run given nothing, so nothing unknown widens. `name`: the user's name
    /// when known (nil: looked up, NSS).
    public static func identified(_ credentials: Credentials, adminGroup: String = AdminGroup.name, name: String? = nil,
                                  runs: (UInt32) -> Run?) -> Caller {
        let name = name ?? UserDatabase.userName(credentials.uid) ?? String(credentials.uid)
        return Caller(principal: Principal(uid: credentials.uid, name: name),
                      standing: standing(of: credentials, adminGroup: adminGroup),
                      run: runScope(of: credentials, runs: runs), adminGroup: adminGroup)
    }

    /// This process, for the CLI's commands that read without devaccessd.
    public static func thisProcess(adminGroup: String = AdminGroup.name) -> Caller {
        identified(.ofThisProcess(), adminGroup: adminGroup, runs: { _ in nil })
    }

    /// Root; an administrator: a process whose credentials (SO_PEERCRED gid, SO_PEERGROUPS)
    /// hold the admin group **and** whose user is still a member as a fresh login sees it
    /// (NSS). The group is looked up on every call, so one created while devaccessd runs
    /// counts at once; a session started before its user joined the group does not hold it,
    /// exactly as the kernel sees that session; and a session started before its user was
    /// removed from the group (`gpasswd -d`, `usermod -G`) still holds the gid but is no
    /// administrator any more: the credentials alone would keep an ex-administrator's tmux
    /// or background process approving and granting for as long as it runs. A uid with no
    /// passwd entry (a subordinate uid) is never an administrator. NSS is asked only for a
    /// process that holds the gid.
    public static func standing(of credentials: Credentials, adminGroup: String = AdminGroup.name) -> Standing {
        if credentials.uid == 0 { return .root }
        if let gid = UserDatabase.groupID(adminGroup), credentials.holds(gid),
           let user = try? UserDatabase.identity(uid: credentials.uid), user.isMember(of: gid) {
            return .admin
        }
        return SubordinateIDs.accountable(credentials.uid) != credentials.uid ? .subordinate : .user
    }

    private static func runScope(of credentials: Credentials, runs: (UInt32) -> Run?) -> RunScope? {
        let gids = ([credentials.gid] + credentials.groups).filter(RunGroups.contains)
        guard !gids.isEmpty else { return nil }
        let scopes = gids.map { gid in runs(gid).map(RunScope.init) ?? .unrecorded(gid: gid) }
        return scopes.first(where: \.strict) ?? scopes[0]
    }
}

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
