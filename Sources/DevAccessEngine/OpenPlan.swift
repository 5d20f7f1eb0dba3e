import FoundationEssentials
import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// `open`, decided: which node of which device devaccessd opens for a caller the judge let
/// ask, with what access and on which grant, or why not. A function of what was asked and
/// what was read at one moment (the permission's devices, the user's status, the decisions
/// in force, a privacy switch); devaccessd opens, audits and replies.
public enum OpenPlan {
    public enum Outcome: Sendable, Equatable {
        /// Open `node` with `access`; `grant` nil: the user's own access to every node of the
        /// device allowed it (opening for them gives nothing new).
        case open(device: Device, node: DeviceNode, facts: NodeFacts, access: AccessMode, grant: Grant?)
        /// The caller may not (audited as a refusal); the words follow the caller's description.
        case refused(String)
        /// The order names what is not there, or asks more than the node needs.
        case badArgument(String)
    }

    /// What `open` is decided from, read at one moment.
    public struct Inputs: Sendable {
        /// The devices of the order's permission, as devaccessd's own fresh probe lists them.
        public var devices: [Device]
        /// The user's status for the permission (nil: none could be evaluated).
        public var status: PermissionStatus?
        /// The decisions in force (`activeGrants`).
        public var active: [Grant]
        /// The switch that has the permission off for everyone now, if any.
        public var switchedOff: PrivacySwitch?

        public init(devices: [Device], status: PermissionStatus?, active: [Grant], switchedOff: PrivacySwitch?) {
            self.devices = devices
            self.status = status
            self.active = active
            self.switchedOff = switchedOff
        }
    }

    /// `caller`: how the refusal names the caller ("alice (uid 1000, pid 42)").
    public static func decide(_ order: OpenOrder, for subject: UserIdentity, caller: String, inputs: Inputs) -> Outcome {
        guard let device = inputs.devices.first(where: { $0.id == order.device }) else {
            return .badArgument("no \(order.permission) device '\(order.device)' is present; 'status' lists the devices")
        }
        guard case .nodes = device.route, !device.nodes.isEmpty else {
            return .badArgument("\(order.permission) is served by devaccessd, not opened: ask for it with 'location'")
        }
        let node: DeviceNode
        switch chosenNode(order.node, of: device) {
        case .success(let chosen): node = chosen
        case .failure(let problem): return .badArgument(problem.reason)
        }
        let access = order.access ?? node.required
        guard node.required.isSuperset(of: access) else {
            return .badArgument("\(node.path) is used with \(node.required.symbolic) access; '\(access.symbolic)' is "
                + "more than it needs")
        }
        return decide(order.permission, device: device, node: node, access: access, for: subject, caller: caller,
                      inputs: inputs)
    }

    /// The switch, the policy and the decisions, for the node chosen.
    private static func decide(_ permission: Permission, device: Device, node: DeviceNode, access: AccessMode,
                               for subject: UserIdentity, caller: String, inputs: Inputs) -> Outcome {
        if let off = inputs.switchedOff {
            return .refused("\(permission) is switched off for everyone" + (off.reason.isEmpty ? "" : ": \(off.reason)"))
        }
        if inputs.status?.status == .restricted {
            return .refused("the policy forbids \(permission) for \(subject.name); nothing was opened")
        }
        let grant: Grant?
        switch allowance(permission, device: device, subject: subject, status: inputs.status, active: inputs.active) {
        case .success(let allowing): grant = allowing
        case .failure(let problem): return .refused("\(caller) " + problem.reason)
        }
        guard let facts = node.facts else {
            return .badArgument("\(node.path) cannot be examined now; nothing was opened")
        }
        return .open(device: device, node: node, facts: facts, access: access, grant: grant)
    }

    /// Why a step of `open` stops it.
    struct Problem: Error {
        var reason: String
    }

    /// The node the caller named, which must be one of the device's own, else its first.
    static func chosenNode(_ path: String?, of device: Device) -> Result<DeviceNode, Problem> {
        guard let path else { return .success(device.nodes[0]) }
        guard let named = device.nodes.first(where: { $0.path == path }) else {
            return .failure(Problem(reason: "'\(path)' is not a node of device '\(device.id)'; its nodes: "
                + device.nodes.map(\.path).joined(separator: ", ")))
        }
        return .success(named)
    }

    /// What allows the open: the newest decision for the device (as the enforcer applies
    /// them), else, with nothing decided, the user's own access to every node of it (a group,
    /// an ACL entry devaccess did not make). A denial outweighs such access.
    static func allowance(_ permission: Permission, device: Device, subject: UserIdentity, status: PermissionStatus?,
                          active: [Grant]) -> Result<Grant?, Problem> {
        let decision = Decisions(active: active).decision(uid: subject.uid, permission: permission, deviceID: device.id)
        let ownAccess = status?.devices.first { $0.device.id == device.id }?.usable == true
        switch decision?.decision {
        case .allow?:
            return .success(decision)
        case .deny?:
            return .failure(Problem(reason: "is denied \(permission) on device '\(device.id)' ("
                + "\(decision.map(Decisions.describe) ?? "a decision")); nothing was opened"))
        case nil where ownAccess:
            return .success(nil)
        case nil:
            return .failure(Problem(reason: "holds no grant for \(permission) on device '\(device.id)'; "
                + "request it first (DeviceAccess.request, 'devaccess request \(permission)')"))
        }
    }

    /// The decisions in force: not what the ledger still holds but has ended, that is a
    /// revoke, deny or reset the ledger could not record yet (`withheld`: its entries are
    /// off already), and a `once` grant whose process exited (ended, or to be recorded as
    /// ended, by the engine's next run).
    public static func activeGrants(_ grants: [Grant], withheld: Set<Int64>, now: Date) -> [Grant] {
        grants.filter { grant in
            grant.isActive(at: now) && !withheld.contains(grant.id)
                && (grant.holder.map { ProcessLiveness.gone($0) == nil } ?? true)
        }
    }
}
