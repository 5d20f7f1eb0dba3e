import Foundation
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol

/// What devaccessd answers: `hello`, `status` (a fresh probe evaluated with the
/// ledger's decisions and drift, exactly as `devaccess status` computes it locally,
/// for the peer, or for another user when the peer is an admin) and `request`
/// (refused as not implemented until the consent flows exist: nothing is granted or
/// recorded).
///
/// Everything a peer may not do is answered `permission-denied` and appended to the
/// ledger as a `refused` event with the peer's kernel identity.
public final class BrokerService: RequestHandler {
    public static let serverName = "devaccessd \(Daemon.version)"

    private let probe: FreshProbe
    private let rules: AccessRules
    private let ledger: Ledger?
    private let log: BrokerLog

    public init(probe: FreshProbe, rules: AccessRules, ledger: Ledger?, log: BrokerLog) {
        self.probe = probe
        self.rules = rules
        self.ledger = ledger
        self.log = log
    }

    public func handle(_ envelope: RequestEnvelope, from peer: Peer) async -> Reply {
        switch envelope.request {
        case .hello:
            return .hello(HelloReply(server: Self.serverName, peer: PeerInfo(
                uid: peer.uid, gid: peer.gid, pid: peer.pid, groups: peer.groups,
                user: UserDatabase.userName(peer.uid), program: peer.program, admin: rules.isAdmin(peer))))
        case .status(let query):
            return await status(query, id: envelope.id, peer: peer)
        case .request(let request):
            return self.request(request, peer: peer)
        }
    }

    // MARK: status

    private func status(_ query: StatusQuery, id: Int64, peer: Peer) async -> Reply {
        let subject: UserIdentity
        if let text = query.user {
            do {
                subject = try UserDatabase.identity(for: text)
            } catch {
                switch error {
                case .noSuchUser, .noSuchUID, .invalidUID:
                    return .error(ProtocolError(.noSuchUser, context: "$.user", reason: error.description))
                case .lookupFailed:
                    return .error(ProtocolError(.internal, context: "$.user", reason: error.description))
                }
            }
            if subject.uid != peer.uid && !rules.allows(.statusOfOthers, for: peer) {
                return refuse(.statusOfOthers, id: id, peer: peer, subject: Principal(uid: subject.uid, name: subject.name),
                              reason: "\(describe(peer)) may not read the status of \(subject.name) (uid \(subject.uid)): "
                                  + "only root and members of group '\(rules.adminGroup)' may ask about other users")
            }
        } else {
            subject = identity(of: peer)
        }
        let permissions = query.permissions ?? Permission.all
        let reports = await probe.reports(permissions)
        let reading = ledgerReading(uid: subject.uid)
        let statuses = reports.map { LedgerStatus.evaluate($0, for: subject, ledger: reading) }
        return .status(StatusReply(user: subject.name, uid: subject.uid, permissions: statuses))
    }

    /// The subject's standing decisions and the recorded ACL entries, read now.
    private func ledgerReading(uid: UInt32) -> LedgerReading {
        guard let ledger else { return .absent(path: "(no ledger)") }
        do {
            let grants = try ledger.grants(uid: uid)
            let records = try ledger.aclEntries()
            return .loaded(LedgerSnapshot(path: ledger.path, decisions: Decisions(active: grants), records: records))
        } catch {
            log.error("cannot read the ledger for a status", ["error": error.description])
            return .unreadable(path: ledger.path, problem: error.description)
        }
    }

    /// The peer's user as a fresh login sees it (as `devaccess status` does locally);
    /// a uid without a passwd entry gets the groups its process holds.
    private func identity(of peer: Peer) -> UserIdentity {
        if let identity = try? UserDatabase.identity(uid: peer.uid) { return identity }
        return UserIdentity(uid: peer.uid, name: String(peer.uid), primaryGID: peer.gid,
                            groups: ([peer.gid] + peer.groups).map { GroupRef(gid: $0, name: UserDatabase.groupName($0)) })
    }

    // MARK: request

    private func request(_ request: AccessRequest, peer: Peer) -> Reply {
        .error(ProtocolError(.notImplemented, context: "request",
            reason: "requesting " + request.permissions.map(\.rawValue).joined(separator: ", ")
                + " needs the consent flows (ask, auth_self, auth_admin), which come with the policy work; "
                + "nothing was granted or recorded. An administrator can grant access with 'devaccess grant'."))
    }

    // MARK: refusals

    private func describe(_ peer: Peer) -> String {
        "\(UserDatabase.userName(peer.uid) ?? "uid \(peer.uid)") (uid \(peer.uid), pid \(peer.pid))"
    }

    private func refuse(_ operation: Operation, id: Int64, peer: Peer, subject: Principal?, reason: String) -> Reply {
        let actor = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        var details = ["operation": operation.rawValue, "request_id": String(id), "pid": String(peer.pid),
                       "gid": String(peer.gid), "reason": reason]
        if let problem = peer.programProblem { details["program_problem"] = problem }
        let event = AuditEvent(type: .refused, actor: actor, subject: subject, program: peer.program, details: details)
        log.notice("refused", ["operation": operation.rawValue, "uid": String(peer.uid), "pid": String(peer.pid),
                               "program": peer.program ?? "-", "subject": subject?.description ?? "-"])
        if let ledger {
            do {
                try ledger.append(event)
            } catch {
                log.error("could not record a refusal in the ledger", ["error": error.description])
            }
        }
        return .error(ProtocolError(.permissionDenied, context: operation.rawValue, reason: reason))
    }
}
