import DevAccessArguments
import DevAccessCore
import DevAccessInterface
import DevAccessSystem
import DevAccessEngine

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
        // The engine in this process, with this process's credentials: devaccessd has no `who`
        // (it would inspect every process as root); the caller sees what it may inspect itself.
        let interface: any DevAccessInterface = try CommonOptions.reads(arguments, command: spec.name).readingEngine()
        let document = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await interface.who(WhoQuery(permissions: permissions, allNodes: arguments.has("all-nodes")))
        }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(document))
            return .success
        }
        let rows = document.holders
        var text = rows.isEmpty ? "nobody holds \(kinds(permissions)) open\n" : table(rows) + "\n"
        if !document.notes.isEmpty {
            text += "\n" + document.notes.map { "- " + TerminalText.field($0) }.joined(separator: "\n") + "\n"
        }
        console.out(text)
        return .success
    }

    /// "a camera or microphone node", for the line that says nobody holds one.
    static func kinds(_ permissions: [Permission]) -> String {
        let words = permissions.map(\.rawValue)
        let joined = words.count <= 1 ? words.joined()
            : words.dropLast().joined(separator: ", ") + " or " + (words.last ?? "")
        return "a " + joined + " node"
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
}
