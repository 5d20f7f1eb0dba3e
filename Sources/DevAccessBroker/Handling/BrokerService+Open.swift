import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol

/// `open`: the portal model. devaccessd opens a node of a device the peer's
/// user holds a grant for and passes the descriptor, so the program needs no ACL entry.
/// The device is named by its id from `status`; the node is one devaccessd's own fresh
/// probe lists for that device, checked again on the descriptor after the open.
extension BrokerService {
    /// The reply, and the descriptor to pass with it (nil when refused).
    func open(_ order: OpenOrder, id: Int64, peer: Peer) async -> (Reply, CInt?) {
        let subject = identity(of: peer)
        let principal = Principal(uid: subject.uid, name: subject.name)
        func refused(_ reason: String) -> (Reply, CInt?) {
            (refuse("open", id: id, peer: peer, subject: principal, reason: reason), nil)
        }
        func badArgument(_ reason: String) -> (Reply, CInt?) {
            (.error(ProtocolError(.badArgument, context: "$.device", reason: reason)), nil)
        }
        if case .failure(let refusal) = judged(.open(order.permission), operation: "open", id: id, peer: peer,
                                               caller: caller(of: peer), subject: principal) {
            return (refusal.reply, nil)
        }
        let (reports, read) = await gathered([order.permission])
        guard let report = reports.first(where: { $0.permission == order.permission }),
              let device = report.devices.first(where: { $0.id == order.device }) else {
            return badArgument("no \(order.permission) device '\(order.device)' is present; 'status' lists the devices")
        }
        guard case .nodes = device.route, !device.nodes.isEmpty else {
            return badArgument("\(order.permission) is served by devaccessd, not opened: ask for it with 'location'")
        }
        let node: DeviceNode
        switch Self.node(order.node, of: device) {
        case .success(let chosen): node = chosen
        case .failure(let problem): return badArgument(problem.reason)
        }
        let access = order.access ?? node.required
        guard node.required.isSuperset(of: access) else {
            return badArgument("\(node.path) is used with \(node.required.symbolic) access; '\(access.symbolic)' is more "
                + "than it needs")
        }
        if let off = read.switchedOff(order.permission) {
            return refused("\(order.permission) is switched off for everyone" + (off.reason.isEmpty ? "" : ": \(off.reason)"))
        }
        let status = statuses(for: subject, reports: [report], read: read).first
        if status?.status == .restricted {
            return refused("the policy forbids \(order.permission) for \(subject.name); nothing was opened")
        }
        let decision: Grant?
        switch allowance(order.permission, device: device, subject: subject, status: status, read: read) {
        case .success(let grant): decision = grant
        case .failure(let problem): return refused("\(describe(peer)) " + problem.reason)
        }
        guard let facts = node.facts else {
            return badArgument("\(node.path) cannot be examined now; nothing was opened")
        }
        let descriptor: CInt
        do {
            descriptor = try NodeOpener.open(node.path, access: access, major: facts.major, minor: facts.minor)
        } catch {
            return (.error(ProtocolError(.internal, context: "open", reason: error.description)), nil)
        }
        auditOpen(peer: peer, subject: principal, device: device, node: node.path, access: access, grant: decision)
        return (.opened(OpenedReply(permission: order.permission, device: device.id, node: node.path, access: access)),
                descriptor)
    }

    /// Why a step of `open` stops it: the words of the refusal or the bad argument.
    struct OpenProblem: Error {
        var reason: String
    }

    /// The node the caller named, which must be one of the device's own, else its first.
    static func node(_ path: String?, of device: Device) -> Result<DeviceNode, OpenProblem> {
        guard let path else { return .success(device.nodes[0]) }
        guard let named = device.nodes.first(where: { $0.path == path }) else {
            return .failure(OpenProblem(reason: "'\(path)' is not a node of device '\(device.id)'; its nodes: "
                + device.nodes.map(\.path).joined(separator: ", ")))
        }
        return .success(named)
    }

    /// What allows the open: the newest decision for the device (as the enforcer applies
    /// them), else, with nothing decided, the user's own access to every node of it (a group,
    /// an ACL entry devaccess did not make): opening for them then gives nothing new. A
    /// denial outweighs such access. Not what the ledger still holds but has ended: a revoke,
    /// deny or reset the ledger could not record yet (its entries are already off), and a
    /// `once` grant whose process exited (ended, or to be recorded as ended, by the engine's
    /// next run). The grant that allows it (nil: own access), or why not.
    func allowance(_ permission: Permission, device: Device, subject: UserIdentity, status: PermissionStatus?,
                   read: DecisionRead) -> Result<Grant?, OpenProblem> {
        let now = Date()
        let withheld = enforcement?.withheldGrants ?? []
        let active = read.grants.filter { grant in
            grant.isActive(at: now) && !withheld.contains(grant.id)
                && (grant.holder.map { ProcessLiveness.gone($0) == nil } ?? true)
        }
        let decision = Decisions(active: active).decision(uid: subject.uid, permission: permission, deviceID: device.id)
        let ownAccess = status?.devices.first { $0.device.id == device.id }?.usable == true
        switch decision?.decision {
        case .allow?:
            return .success(decision)
        case .deny?:
            return .failure(OpenProblem(reason: "is denied \(permission) on device '\(device.id)' ("
                + "\(decision.map(Decisions.describe) ?? "a decision")); nothing was opened"))
        case nil where ownAccess:
            return .success(nil)
        case nil:
            return .failure(OpenProblem(reason: "holds no grant for \(permission) on device '\(device.id)'; "
                + "request it first (DeviceAccess.request, 'devaccess request \(permission)')"))
        }
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
        guard let ledger else { return }
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
        guard count > 0, let ledger else { return }
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
