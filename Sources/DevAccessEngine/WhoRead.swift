import DevAccessCore
import DevAccessInterface
import DevAccessSystem

extension EngineReads {
    /// `who`, read in this process: the devices probed here, then every open file of every
    /// process this process may inspect matched by device number (`NodeHolders`).
    func who(_ query: WhoQuery) async throws(InterfaceError) -> WhoDocument {
        let reports = try await devices(query.permissions)
        let watch = HolderWatch(reports, allNodes: query.allNodes)
        let scan = NodeHolders.scan(for: watch.nodes)
        var notes = watch.notes
        if scan.uninspected > 0 {
            notes.append("\(scan.uninspected) process\(scan.uninspected == 1 ? "" : "es") could not be inspected "
                + "(run as root to see every user's)")
        }
        let rows = scan.holders.flatMap { holder in
            (watch.owners[holder.node.path] ?? []).map { WhoDocument.Holder(holder, owner: $0) }
        }
        return WhoDocument(holders: rows, uninspected: scan.uninspected, notes: notes)
    }
}

/// The nodes to look for, which device of which permission each belongs to, and what to tell.
struct HolderWatch {
    struct Owner {
        var permission: Permission
        var device: Device
        var role: String
    }

    var nodes: [WatchedNode] = []
    var owners: [String: [Owner]] = [:]
    var notes: [String] = []
    var skippedControl = false

    init(_ reports: [AdapterReport], allNodes: Bool) {
        for report in reports {
            if let why = report.unavailableReason {
                notes.append("\(report.permission.rawValue): unavailable: \(why)")
            }
            for device in report.devices {
                for node in device.nodes {
                    guard allNodes || Self.captures(node, for: report.permission) else {
                        skippedControl = true
                        continue
                    }
                    guard let facts = node.facts, facts.kind == .characterDevice else {
                        if case .unusable(let why) = node.state {
                            notes.append("\(node.path) (\(report.permission.rawValue)) not examined: \(why)")
                        }
                        continue
                    }
                    if owners[node.path] == nil {
                        nodes.append(WatchedNode(path: node.path, major: facts.major, minor: facts.minor))
                    }
                    owners[node.path, default: []].append(Owner(permission: report.permission, device: device,
                                                                role: node.role))
                }
            }
        }
        if skippedControl {
            notes.append("only capture nodes are listed: holding a sound card's control node records nothing "
                + "(--all-nodes lists those too)")
        }
        if let location = reports.first(where: { $0.permission == .location }) {
            notes.append(location.devices.isEmpty
                ? "location: no receiver node is known; programs that read location from gpsd hold its socket, "
                    + "not a node"
                : "location: programs that read gpsd hold its socket, not a node; the receiver's holder is gpsd")
        }
    }

    /// Camera video nodes and microphone capture PCMs capture; location's receiver is its source.
    static func captures(_ node: DeviceNode, for permission: Permission) -> Bool {
        permission == .location ? node.role == "receiver" : node.role == "capture"
    }

    /// "a camera or microphone node", for the line that says nobody holds one.
    func kinds(_ permissions: [Permission]) -> String {
        let words = permissions.map(\.rawValue)
        let joined = words.count <= 1 ? words.joined()
            : words.dropLast().joined(separator: ", ") + " or " + (words.last ?? "")
        return "a " + joined + " node"
    }
}


extension WhoDocument.Holder {
    init(_ holder: NodeHolder, owner: HolderWatch.Owner) {
        self.init(pid: holder.pid, startTicks: holder.startTicks, user: holder.userName, uid: holder.realUID,
                  euid: holder.effectiveUID, program: holder.program, programDeleted: holder.programDeleted ? true : nil,
                  command: holder.command, permission: owner.permission.rawValue, device: owner.device.id,
                  deviceName: owner.device.name, node: holder.node.path, role: owner.role, opened: holder.openedPath,
                  fd: holder.fd, access: holder.access.symbolic, runGroup: holder.runGroup)
    }
}
