import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessEngine
import DevAccessInterface

/// `open`: the portal model. devaccessd opens a node of a device the peer's
/// user holds a grant for and passes the descriptor, so the program needs no ACL entry.
/// The device is named by its id from `status`; the node is one devaccessd's own fresh
/// probe lists for that device (`OpenPlan`), checked again on the descriptor after the open.
extension BrokerService {
    /// The reply, and the descriptor to pass with it (nil when refused): the judge, then
    /// the engine's `OpenPlan` on what was read, then the open itself.
    func open(_ order: OpenOrder, id: Int64, peer: Peer) async -> (Reply, CInt?) {
        let subject = identity(of: peer)
        let principal = Principal(uid: subject.uid, name: subject.name)
        if case .failure(let refusal) = judged(.open(order.permission), operation: "open", id: id, peer: peer,
                                               caller: caller(of: peer), subject: principal) {
            return (refusal.reply, nil)
        }
        let inputs = await openInputs(order.permission, for: subject)
        switch OpenPlan.decide(order, for: subject, caller: describe(peer), inputs: inputs) {
        case .refused(let reason):
            return (refuse("open", id: id, peer: peer, subject: principal, reason: reason), nil)
        case .badArgument(let reason):
            return (.error(ProtocolError(.badArgument, context: "$.device", reason: reason)), nil)
        case .open(let device, let node, let facts, let access, let grant):
            let descriptor: CInt
            do {
                descriptor = try NodeOpener.open(node.path, access: access, major: facts.major, minor: facts.minor)
            } catch {
                return (.error(ProtocolError(.internal, context: "open", reason: error.description)), nil)
            }
            auditOpen(peer: peer, subject: principal, device: device, node: node.path, access: access, grant: grant)
            return (.opened(OpenedReply(permission: order.permission, device: device.id, node: node.path,
                                        access: access)), descriptor)
        }
    }

    /// What `open` is decided from: the permission's devices by a fresh probe, the user's
    /// status and the decisions in force, read at one moment.
    private func openInputs(_ permission: Permission, for subject: UserIdentity) async -> OpenPlan.Inputs {
        let (reports, read) = await gathered([permission])
        let report = reports.first { $0.permission == permission }
        let status = report.flatMap { statuses(for: subject, reports: [$0], read: read).first }
        return OpenPlan.Inputs(devices: report?.devices ?? [], status: status,
                               active: OpenPlan.activeGrants(read.grants, withheld: enforcement.withheldGrants,
                                                             now: Date()),
                               switchedOff: read.switchedOff(permission))
    }

    /// One `device_open` event per open, up to the user's budget a minute; the rest are
    /// counted, and the count is written when the minute ends (`recordOpensLeftOut`) or by
    /// the user's next written open, whichever comes first.
    /// `grant` nil: the user's own access to the nodes allowed it (`basis=own-access`).
    private func auditOpen(peer: Peer, subject: Principal, device: Device, node: String, access: AccessMode,
                           grant: Grant?) {
        let leftOut: Int
        switch opens.admit(peer.accountable) {
        case .record(let count): leftOut = count
        case .skip(let windowEnds?):
            // A thread that sleeps until the window ends, then writes the count (if none can
            // be made, the next written open carries it). Not a task: the runtime's timers
            // would hold descriptors of their own from then on. The uid alone goes with it,
            // not the peer, whose pinned process directory would stay open until then.
            let uid = peer.accountable
            try? DetachedThread.start(name: "opens-count") { [self] in
                _ = try? Poll.wait([], until: windowEnds)
                recordOpensLeftOut(of: uid)
            }
            return
        case .skip: return
        }
        var details = ["access": access.symbolic, "pid": String(peer.pid)]
        if let grant {
            details["grant"] = String(grant.id)
            details["basis"] = "grant"
        } else {
            details["basis"] = "own-access"
        }
        if leftOut > 0 { details[Self.notRecordedKey] = String(leftOut) }
        let actor = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        let event = AuditEvent(type: .deviceOpen, actor: actor, subject: subject, permission: device.permission,
                               deviceID: device.id, deviceName: device.name, program: peer.program, nodePath: node,
                               details: details)
        do {
            try ledger.append(event)
        } catch {
            log.error("could not record a device open in the ledger", ["error": error.description])
        }
    }

    /// One `device_open` event without a device for the opens of `uid` its minute left out
    /// (`opens_not_recorded`): written when the minute ends, and for every such user when
    /// devaccessd stops (`ended`), so no count waits for an open that may never come. A
    /// crash loses the count of the minute it happened in.
    func recordOpensLeftOut(of uid: UInt32, ended: Bool = false) {
        let count = opens.takeLeftOut(uid, ended: ended)
        guard count > 0 else { return }
        let name = UserDatabase.userName(uid) ?? String(uid)
        let event = AuditEvent(type: .deviceOpen, subject: Principal(uid: uid, name: name),
                               details: [Self.opensNotRecordedKey: String(count)])
        do {
            try ledger.append(event)
        } catch {
            log.error("could not record the count of device opens left out of the ledger",
                      ["error": error.description, "uid": String(uid), "count": String(count)])
        }
    }

    /// Writes every count of opens left out now (devaccessd stops).
    func recordAllOpensLeftOut() {
        for uid in opens.uidsWithLeftOut() { recordOpensLeftOut(of: uid, ended: true) }
    }

    static let opensNotRecordedKey = "opens_not_recorded"
}
