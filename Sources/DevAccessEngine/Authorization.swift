import DevAccessCore

/// The one authorization table: who may ask for what, keyed by who the kernel says the
/// caller is (`Caller`: root, administrator, user, subordinate uid, process of a run or of a
/// strict run). Grants, policy and devices are judged after it, by the operation (a user's
/// own grant opens a node; the policy decides a request): this table says who may ask at all
/// and how far a run reaches. Its predicates are internal, so transport code can only ask
/// for a verdict (`Caller.judged`), never decide for itself.
public enum Authorization {
    /// What a caller asks for, as far as the judge needs to know.
    public enum Action: Sendable, Hashable {
        /// The statuses (and their updates): the caller's own, or another user's.
        case status
        /// Which processes hold the device nodes open, read in the caller's own process with
        /// its own credentials (`who`): it shows no more than those let it inspect.
        case who
        /// A request for the caller itself; `accuracy`: the location level asked.
        case request([Permission], accuracy: LocationAccuracy?)
        /// devaccessd opening a node of a device of `permission` and passing the descriptor.
        case open(Permission)
        /// `devaccess run`: a program started with these permissions.
        case run([Permission], strict: Bool)
        /// The position, at `accuracy` (nil: at the caller's level).
        case location(LocationAccuracy?)
        /// Decisions for others and on the whole system: the approval queue (pending, approve,
        /// reject), decide, revoke and reset of others, reconcile, switches, the audit trail.
        case administer
        /// Ending or forgetting the caller's own standing decisions (revoke, reset, `revoke
        /// --terminate` of its own runs): its user's, which a strict run does not act for.
        case ownDecisions
    }

    /// Whose is the thing acted on.
    public enum Target: Sendable, Hashable {
        case itself
        case anotherUser
    }

    /// The judge's answer.
    public enum Verdict: Sendable, Hashable {
        case allowed
        /// Allowed as far as the run reaches: its permissions, its location level. The
        /// operation serves no more than the scope gives.
        case withinRun(RunScope)
        /// Allowed, and judged as the run's program (its `Program=` rules), not as the user at large.
        case asProgram(RunScope)
        case refused(String)

        public var isRefused: Bool {
            if case .refused = self { return true }
            return false
        }
    }

    static func judge(_ action: Action, caller: Caller, target: Target) -> Verdict {
        if target == .anotherUser || action == .administer {
            return caller.administers ? .allowed : .refused(othersRefusal(caller))
        }
        guard let run = caller.run else { return .allowed }
        return run.strict ? judgeStrict(action, caller: caller, run: run) : judgeRun(action, run: run)
    }

    /// A strict run gets only what it was given: devaccessd is no way around its Landlock rules.
    private static func judgeStrict(_ action: Action, caller: Caller, run: RunScope) -> Verdict {
        switch action {
        case .status, .who:
            return .allowed
        case .open(let permission):
            return run.permissions.contains(permission) ? .withinRun(run)
                : .refused("the caller is in \(run.described); it may not have devaccessd open \(permission.rawValue) "
                    + "(--strict); nothing was opened")
        case .run:
            return .refused("the caller is in \(run.described); a run started from a strict run would not be "
                + "confined by it, so devaccessd starts none (--strict); nothing was run")
        case .location(let asked):
            return judgeStrictLocation(asked, run: run)
        case .request(let permissions, let accuracy):
            return judgeStrictRequest(permissions, accuracy: accuracy, run: run)
        case .administer:
            return .refused(othersRefusal(caller))
        case .ownDecisions:
            return .refused("the caller is in \(run.described); its user's decisions and runs are not the run's "
                + "to end or forget (--strict); nothing was changed")
        }
    }

    private static func judgeStrictLocation(_ asked: LocationAccuracy?, run: RunScope) -> Verdict {
        guard run.permissions.contains(.location), let level = run.accuracy else {
            return .refused("the caller is in \(run.described); it was given no location (--strict)")
        }
        if let asked, asked > level {
            return .refused("the caller is in \(run.described); its location is at \(level) accuracy, not \(asked) "
                + "(--strict)")
        }
        return .withinRun(run)
    }

    private static func judgeStrictRequest(_ permissions: [Permission], accuracy: LocationAccuracy?,
                                           run: RunScope) -> Verdict {
        if let more = permissions.first(where: { !run.permissions.contains($0) }) {
            return .refused("the caller is in \(run.described); a request from it cannot add \(more.rawValue) "
                + "(--strict); nothing was asked or recorded")
        }
        if permissions.contains(.location), let accuracy, accuracy > (run.accuracy ?? .country) {
            return .refused("the caller is in \(run.described); a request from it cannot raise its location level "
                + "(--strict); nothing was asked or recorded")
        }
        return .withinRun(run)
    }

    /// A run without --strict is its user's program: it may do what its user may, and its
    /// requests are its program's (the run's, not the process that connected).
    private static func judgeRun(_ action: Action, run: RunScope) -> Verdict {
        if case .request = action { return .asProgram(run) }
        return .allowed
    }

    private static func othersRefusal(_ caller: Caller) -> String {
        if let run = caller.run, run.strict {
            return "the caller is in \(run.described); a strict run acts for itself only, never as an administrator"
        }
        return "only root and members of the admin group may act for other users or on the approval queue"
    }
}

extension Caller {
    /// The judge's verdict on `action` by this caller, for itself or for another user.
    public func judged(_ action: Authorization.Action, target: Authorization.Target = .itself) -> Authorization.Verdict {
        Authorization.judge(action, caller: self, target: target)
    }

    /// Whether the judge allows `action` at all (within a run's reach or as its program included).
    public func may(_ action: Authorization.Action, target: Authorization.Target = .itself) -> Bool {
        !judged(action, target: target).isRefused
    }
}
