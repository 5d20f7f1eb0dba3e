import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// The caller as the judge sees it (`Caller`, in DevAccessEngine), from the peer's kernel
/// credentials and the ledger's runs; and the refusals the judge's verdicts become. No
/// handler decides who may: each asks the judge for a verdict and obeys it.
extension BrokerService {
    /// Who `peer` is: its standing (root, administrator, subordinate uid, user) and the run
    /// whose group id its connection carries. A peer holding a run group id the ledger
    /// cannot name (unreadable, or no such run) is judged as a strict run given nothing.
    func caller(of peer: Peer) -> Caller {
        Caller.identified(peer.credentials, adminGroup: adminGroup, runs: { [ledger] gid in try? ledger.run(gid: gid) })
    }

    /// `caller(of:)` for a judgment made on the event loop, where every lookup delays every
    /// connection: the uid stands for the user's name (no NSS lookup of it), which only a
    /// refusal's sentence would show, and the ledger (whose reads can wait on a long report)
    /// is read only for root's and administrators' processes that carry a run group id, as
    /// `isUnlimited` reads it: there a strict run limits them. Anyone else's run is left
    /// unnamed, judged as a strict run given nothing: the loop asks only for the caller's own
    /// statuses, which every caller may follow, and such a caller is limited either way.
    func callerOnLoop(of peer: Peer) -> Caller {
        let unlimited = Caller.standing(of: peer.credentials, adminGroup: adminGroup).isUnlimited
        return Caller.identified(peer.credentials, adminGroup: adminGroup, name: String(peer.uid),
                                 runs: { [ledger] gid in unlimited ? try? ledger.run(gid: gid) : nil })
    }

    /// The judge's verdict on `action` for `peer`; a refusal is audited and answered
    /// `permission-denied` (as every refusal is).
    func judged(_ action: Authorization.Action, operation: String, id: Int64, peer: Peer, caller: Caller,
                subject: Principal?) -> Result<Authorization.Verdict, ReplyFailure> {
        let verdict = caller.judged(action)
        guard case .refused(let reason) = verdict else { return .success(verdict) }
        return .failure(ReplyFailure(refuse(operation, id: id, peer: peer, subject: subject, reason: reason)))
    }

    /// Whether the judge lets `peer` act for others, on the approval queue and through the
    /// engine's administrative operations.
    func administers(_ peer: Peer) -> Bool {
        caller(of: peer).may(.administer)
    }

    /// Root and administrators, outside strict runs, are not held to per-user limits and budgets.
    /// Asked on the accept thread too: the ledger (whose reads can wait on a long report) is
    /// read only for root's and administrators' processes that carry a run group id.
    func isUnlimited(_ peer: Peer) -> Bool {
        guard Caller.standing(of: peer.credentials, adminGroup: adminGroup).isUnlimited else { return false }
        // Only a run group id can make root or an administrator limited (a strict run): the
        // whole caller (a second NSS lookup, the ledger's run row) is built for those alone.
        guard ([peer.gid] + peer.groups).contains(where: RunGroups.contains) else { return true }
        return caller(of: peer).isUnlimited
    }

    /// `run` from a strict run: refused (audited); nil when the judge lets it start.
    func judgedRun(_ order: RunOrder, id: Int64, peer: Peer, caller: Caller) -> Reply? {
        let subject = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        guard case .failure(let refusal) = judged(.run(order.permissions, strict: order.strict), operation: "run",
                                                  id: id, peer: peer, caller: caller, subject: subject)
        else { return nil }
        return refusal.reply
    }

    /// Who asks a request, as the judge sees it: a strict run asks for nothing it was not
    /// given; a run's request is its program's.
    func judgedRequester(_ request: AccessRequest, requester: Requester, id: Int64, peer: Peer, caller: Caller,
                         subject: Principal) async -> Result<Requester, ReplyFailure> {
        let caller = await withRunLevel(caller, subject: subject)
        let asked = request.permissions.contains(.location) ? request.accuracy ?? .exact : nil
        switch judged(.request(request.permissions, accuracy: asked), operation: "request", id: id, peer: peer,
                      caller: caller, subject: subject) {
        case .failure(let refusal): return .failure(refusal)
        case .success(.asProgram(let scope)): return .success(Self.requester(requester, asRunOf: scope))
        case .success: return .success(requester)
        }
    }

    /// The level `location` serves at: a strict run's own (the judge refused it when it has
    /// none or was asked finer), else the user's grant (`grantedLocation`).
    func servedLevel(_ query: LocationQuery, subject: Principal, id: Int64, peer: Peer) async
        -> Result<LocationAccuracy, ReplyFailure>
    {
        let caller = await withRunLevel(caller(of: peer), subject: subject)
        switch judged(.location(query.accuracy), operation: "location", id: id, peer: peer, caller: caller,
                      subject: subject) {
        case .failure(let refusal): return .failure(refusal)
        case .success(.withinRun(let scope)):
            guard let level = scope.accuracy else {
                return .failure(ReplyFailure(refuse("location", id: id, peer: peer, subject: subject,
                                                    reason: Self.noLocationGrant(subject))))
            }
            return .success(level)
        case .success: return await grantedLocation(subject, id: id, peer: peer)
        }
    }

    /// The location level run `gid` holds now (its grant, capped by policy); nil: none.
    func runLocationLevel(_ scope: RunScope, subject: Principal) async -> LocationAccuracy? {
        guard scope.permissions.contains(.location) else { return nil }
        let levels = try? await QueuedEngine(enforcement: enforcement).run("location") {
            (engine) throws(EnforcementError) -> ([UInt32: LocationAccuracy], EnforcementReport) in
            (try engine.runLocationAccuracies(for: subject), EnforcementReport())
        }
        return levels?[scope.gid]
    }

    /// A caller with its run's location level filled in, for the judge's location rules.
    func withRunLevel(_ caller: Caller, subject: Principal) async -> Caller {
        guard var scope = caller.run, scope.permissions.contains(.location) else { return caller }
        var leveled = caller
        scope.accuracy = await runLocationLevel(scope, subject: subject)
        leveled.run = scope
        return leveled
    }

    /// A non-strict run's request, judged as the run's program: `Program=` rules match it
    /// when its file is root's alone (as `run` trusts a program), and prompts name it.
    static func requester(_ asked: Requester, asRunOf scope: RunScope) -> Requester {
        var requester = asked
        requester.program = scope.program.path
        var checker = RootInstalledFile()
        var info = stat()
        if stat(scope.program.path, &info) == 0,
           checker.flaw(scope.program.path, expected: FileKey(device: UInt64(info.st_dev),
                                                              inode: UInt64(info.st_ino))) == nil {
            requester.untrusted = nil
        } else {
            requester.untrusted = Requester.notTrusted("\(scope.program.path), the program of run \(scope.id), "
                + "is not root's alone")
        }
        requester.isShell = false
        requester.startedByRun = true
        return requester
    }
}
