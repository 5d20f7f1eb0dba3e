import DevAccessArguments
import DevAccessCore
import DevAccessInterface
import DevAccessSystem
import Glibc

/// `devaccess who`: the processes that hold device nodes open now. A revoke, a deny or an
/// expiry changes the nodes' ACLs, which stops new opens but closes nothing already open:
/// this shows who still has the device, and whether `devaccess run` started them.
enum WhoCommand: Command {
    static let spec = CommandSpec(
        name: "who",
        abstract: "Show the processes that hold camera, microphone or location nodes open.",
        usage: "devaccess who [PERMISSION...] [--all-nodes] [--json]",
        options: [
            CommonOptions.json,
            OptionSpec(long: "all-nodes", short: nil, value: nil,
                       help: "Also nodes that do not capture (a sound card's control node)."),
            CommonOptions.gpsd, CommonOptions.gpsdTimeout,
        ],
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, all are shown.
        Every open file of every process is matched by device number, so a device opened
        through another node or a bind mount is found too. Listed: the process, its user,
        its program, the node, what it was opened for (r, w, rw), and the run of
        'devaccess run' that started it (the run's group id, which its descendants keep).
        Only capture nodes are listed (camera video nodes, microphone capture PCMs,
        location receivers gpsd names), unless --all-nodes. Programs that read location
        from gpsd hold its socket, not the receiver: gpsd is the holder shown.
        An ACL change does not close a descriptor already open: to end access now, end the
        holders ('devaccess revoke --terminate' for runs).
        Without root only your own processes can be inspected; the others are counted.
        Exit codes: 0 (with holders or none), 1 error, 64 usage error.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let permissions = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let reports = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await reads.devices(permissions)
        }
        let watch = Watch(reports, allNodes: arguments.has("all-nodes"))
        let scan = NodeHolders.scan(for: watch.nodes)
        var notes = watch.notes
        if scan.uninspected > 0 {
            notes.append("\(scan.uninspected) process\(scan.uninspected == 1 ? "" : "es") could not be inspected "
                + "(run as root to see every user's)")
        }
        let rows = scan.holders.flatMap { holder in
            (watch.owners[holder.node.path] ?? []).map { WhoDocument.Holder(holder, owner: $0) }
        }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(WhoDocument(holders: rows, uninspected: scan.uninspected, notes: notes)))
            return .success
        }
        var text = rows.isEmpty ? "nobody holds \(watch.kinds(permissions)) open\n" : table(rows) + "\n"
        if !notes.isEmpty { text += "\n" + notes.map { "- " + TerminalText.field($0) }.joined(separator: "\n") + "\n" }
        console.out(text)
        return .success
    }

    /// The ACCESS column: `r`, `w`, `rw`, from the JSON word.
    private static let short = [AccessMode.read.symbolic: "r", AccessMode.write.symbolic: "w", AccessMode.readWrite.symbolic: "rw"]

    static func table(_ holders: [WhoDocument.Holder]) -> String {
        let header = ["PID", "USER", "PROGRAM", "PERMISSION", "DEVICE", "NODE", "ACCESS", "STARTED-BY"]
        let rows = holders.map { holder -> [String] in
            var user = holder.user ?? "uid \(holder.uid)"
            if holder.euid != holder.uid { user += " (euid \(holder.euid))" }
            // The kernel's executable; the process's own argv[0] (which it may have rewritten) only without one.
            let program = holder.program.map { $0 + (holder.programDeleted == true ? " (deleted)" : "") }
                ?? "[\(holder.command ?? "?")]"
            let node = holder.opened == holder.node ? holder.node : "\(holder.node) (opened as \(holder.opened))"
            let access = short[holder.access] ?? "-"
            return [String(holder.pid), user, program, holder.permission, holder.deviceName, node, access,
                    holder.run.map { "devaccess run \($0)" } ?? "-"].map(TerminalText.field)
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        return ([header] + rows).map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }.joined()
        }.joined(separator: "\n")
    }

    /// The nodes to look for, which device of which permission each belongs to, and what to tell.
    struct Watch {
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
}

/// `devaccess who --json` (docs/json.md).
struct WhoDocument: Encodable {
    struct Holder: Encodable {
        var pid: Int32
        var startTicks: UInt64
        var user: String?
        var uid: UInt32
        var euid: UInt32
        var program: String?
        var programDeleted: Bool?
        var command: String?
        var permission: String
        var device: String
        var deviceName: String
        var node: String
        var role: String
        var opened: String
        var fd: Int32
        var access: String
        var run: Int64?
        var runGroup: UInt32?

        init(_ holder: NodeHolder, owner: WhoCommand.Watch.Owner) {
            pid = holder.pid
            startTicks = holder.startTicks
            user = holder.userName
            uid = holder.realUID
            euid = holder.effectiveUID
            program = holder.program
            programDeleted = holder.programDeleted ? true : nil
            command = holder.command
            permission = owner.permission.rawValue
            device = owner.device.id
            deviceName = owner.device.name
            node = holder.node.path
            role = owner.role
            opened = holder.openedPath
            fd = holder.fd
            access = holder.access.symbolic
            runGroup = holder.runGroup
            run = holder.runGroup.map(WhoDocument.runID)
        }
    }

    var holders: [Holder]
    var uninspected: Int
    var notes: [String]

    /// The run a group id was handed to: ids go out in order from RunGroups.first (run 1), so
    /// this is the run's id in the ledger ('devaccess list') until 16M runs have wrapped the range.
    static func runID(_ gid: UInt32) -> Int64 { Int64(gid - RunGroups.first) + 1 }
}
