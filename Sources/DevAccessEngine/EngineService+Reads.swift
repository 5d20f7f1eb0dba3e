import DevAccessCore
import DevAccessEnforcement
import DevAccessInterface
import DevAccessProtocol
import DevAccessSystem

/// The reads of the contract: `status` (whose statuses a caller may see, and the one place
/// that turns devices, decisions and policy into statuses, for devaccessd and for the CLI's
/// process), `who` (in the caller's process) and `statusUpdates` (devaccessd's alone).
extension EngineService {
    // MARK: Status

    /// Read in this process: the devices, the ledger (read-only; when it is root's alone
    /// here, the decisions are unknown, `decisionsUnknown` says why) and the policy.
    public func status(_ query: StatusQuery) async throws(InterfaceError) -> StatusReply {
        let subject = try statusSubject(query)
        guard let reads else {
            throw .failed("this engine reads no status itself: devaccessd passes it the inputs it gathered")
        }
        let ledger = reads.ledger(for: subject.uid)
            ?? .unknown(why: decisionsUnknown ?? "the ledger is root's alone and devaccessd was not asked")
        let inputs = try await reads.statusInputs(query.permissions ?? Permission.all, ledger: ledger)
        return Self.statusReply(for: subject, inputs)
    }

    /// Whose statuses `query` asks for, judged: the caller's own user (any caller), or the
    /// user it names (root and administrators: anyone; others: themselves only). Nothing is
    /// read for a caller refused here.
    public func statusSubject(_ query: StatusQuery) throws(InterfaceError) -> UserIdentity {
        let subject: UserIdentity
        do throws(UserDatabase.LookupError) {
            if let text = query.user {
                subject = try UserDatabase.identity(for: text)
            } else {
                subject = try UserDatabase.identity(uid: caller.uid)
            }
        } catch {
            switch error {
            case .noSuchUser, .noSuchUID, .invalidUID: throw .badArgument(error.description)
            case .lookupFailed: throw .failed(error.description)
            }
        }
        let target: Authorization.Target = subject.uid == caller.uid ? .itself : .anotherUser
        guard case .refused(let reason) = caller.judged(.status, target: target) else { return subject }
        let why = caller.run?.strict == true ? reason
            : "only root and members of group '\(caller.adminGroup)' may see the status of another user"
        throw .refused(operation: "status for another user", reason: "\(caller.principal) may not see the status of "
            + "\(subject.name) (uid \(subject.uid)): \(why); without a user named you see your own")
    }

    /// `subject`'s statuses from `inputs`: each device report evaluated with the subject's
    /// decisions and the policy (`LedgerStatus.evaluate`). devaccessd answers with this from
    /// the inputs it keeps, for a subject `statusSubject` judged (or the peer's own).
    public static func statusReply(for subject: UserIdentity, _ inputs: StatusInputs) -> StatusReply {
        StatusReply(user: subject.name, uid: subject.uid, permissions: statuses(for: subject, inputs))
    }

    public static func statuses(for subject: UserIdentity, _ inputs: StatusInputs) -> [PermissionStatus] {
        inputs.reports.map { report in
            var status = LedgerStatus.evaluate(report, for: subject, ledger: inputs.ledger, policy: inputs.policy)
            if let broken = inputs.brokenPolicy { LedgerStatus.tellLastGoodPolicy(&status, problem: broken) }
            return status
        }
    }

    // MARK: Status updates

    /// The permissions a subscription follows, judged: the caller's own statuses (a
    /// subscription is always the caller's own; `status` of itself).
    public func subscription(_ query: SubscribeQuery) throws(InterfaceError) -> [Permission] {
        if case .refused(let reason) = caller.judged(.status) {
            throw .refused(operation: "subscribe", reason: "\(caller.principal) may not follow its statuses: \(reason)")
        }
        return query.permissions ?? Permission.all
    }

    /// Only devaccessd sees the changes (its engine runs, hotplug, expiries): in this process
    /// there is nothing to follow, and the stream fails at once.
    public func statusUpdates(_ query: SubscribeQuery) -> StatusUpdateStream {
        do throws(InterfaceError) {
            _ = try subscription(query)
        } catch {
            return .failing(error)
        }
        return .failing(.unreachable("status updates come from devaccessd, which sees the changes; "
            + "without it there are none to follow"))
    }

    // MARK: Who

    /// Read in this process, with its own credentials: a caller sees the holders it may
    /// inspect, and the rest counted (`uninspected`).
    public func who(_ query: WhoQuery) async throws(InterfaceError) -> WhoDocument {
        if case .refused(let reason) = caller.judged(.who) {
            throw .refused(operation: "who", reason: "\(caller.principal) may not list who holds the nodes: \(reason)")
        }
        guard let reads else {
            throw .failed("'who' is read in the caller's own process, with its credentials; devaccessd has no 'who'")
        }
        return try await reads.who(query)
    }
}

extension EngineReads {
    /// The engine in this process for its reads (`status`, `who`; not `--offline`: it
    /// takes no engine lock and changes nothing), judged for `caller`.
    public func readingEngine(caller: Caller = .thisProcess(), decisionsUnknown: String? = nil) -> EngineService {
        var engine = EngineService(caller: caller, runner: NoEngineHere(), reads: self)
        engine.decisionsUnknown = decisionsUnknown
        return engine
    }
}

/// The reading engine changes nothing: what needs the enforcement engine goes to devaccessd,
/// or as root with it stopped to `--offline`.
struct NoEngineHere: EngineRunner {
    func run<R: Sendable>(_ operation: String,
                          _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport))
        async throws(InterfaceError) -> R
    {
        throw .unreachable("'\(operation)' is done by devaccessd (or, as root with it stopped, with --offline)")
    }
}
