import DevAccessArguments
import DevAccessCore
import DevAccessSystem
@_spi(CLI) import DevAccess
import DevAccessInterface
import FoundationEssentials
import Glibc
import DevAccessEngine

enum StatusCommand: Command {
    static let spec = CommandSpec(
        name: "status",
        abstract: "Show the status of permissions for a user, and why.",
        usage: "devaccess status [PERMISSION...] [--user USER] [-v] [--json] [--broker [--socket PATH]]",
        options: [CommonOptions.user, CommonOptions.verbose, CommonOptions.json, OutputStyle.colorOption,
                  CommonOptions.gpsd, CommonOptions.gpsdTimeout, CommonOptions.stateDir, BrokerOptions.broker,
                  BrokerOptions.socket],
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, all are shown.
        Each status is computed now from the devices found, their nodes' owner, mode
        and ACL, the user's groups, and the ledger's decisions: authorized (every device
        opens), limited (some), notDetermined (none, nothing decided), denied (a recorded
        denial, even if a group still opens the node), restricted, unavailable.
        By default: one line per permission (status and summary), one per device (usable,
        blocked or denied, its name and id), the decisions that apply (grant ends in local
        time with the time left), and facts that hold for every permission once, after the
        user. Drift (the ledger and the nodes disagree) is always listed with '! drift:'.
        -v adds every node's reason, the nodes that are no device of the permission, and
        who opens the capture nodes without devaccess ('devaccess explain PERMISSION' is
        the same for one permission); --json always has all of it, times in UTC.
        Colour and symbols only on a terminal (see --color; NO_COLOR is honoured).
        With --broker, devaccessd computes the same statuses for you as the kernel
        identifies you (--user only for yourself, or as root or devaccess-admin);
        exit 69 when it cannot be reached, 77 when it refuses.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let permissions = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        let style = try OutputStyle.resolve(arguments, command: spec.name)
        if arguments.has("broker") || arguments.value("socket") != nil {
            return try await BrokerStatus.run(permissions, arguments, console: console, command: spec.name)
        }
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let computed = try await LocalStatus.compute(permissions, reads, arguments, command: spec.name)
        let gate = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await reads.gate(permissions)
        }
        if arguments.has("json") {
            console.out(StatusJSON.status(user: computed.user, uid: computed.uid, permissions: computed.permissions,
                                          gate: gate))
        } else {
            let rendering = StatusRendering(user: LocalStatus.user(of: computed), statuses: computed.permissions,
                                            gate: gate, time: HumanTime.now())
            console.out(arguments.has("verbose") ? rendering.verbose() : rendering.summary(), style: style)
        }
        return .success
    }
}

enum ExplainCommand: Command {
    static let spec = CommandSpec(
        name: "explain",
        abstract: "Walk through why a permission has its status, node by node.",
        usage: "devaccess explain PERMISSION [--user USER]",
        options: [CommonOptions.user, OutputStyle.colorOption, CommonOptions.gpsd, CommonOptions.gpsdTimeout,
                  CommonOptions.stateDir],
        discussion: """
        \(CommonOptions.permissionsHelp)
        The long form of 'devaccess status PERMISSION -v': the status and its summary, each
        device, the decisions and the policy, then every node: its owner, group, mode and
        ACL, what the user may do with it and by which rule (owner, named ACL entry, group,
        other), the nodes looked at and left out (radio, vbi, touch, output, metadata),
        probes that fell back, drift, and for camera and microphone who opens the capture
        nodes without devaccess. Exit codes: 0, 1 error, 64 usage error, 77 refused
        (another user's status).
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count == 1 else {
            throw UsageError(message: arguments.positionals.isEmpty
                ? "missing PERMISSION (one of: \(Permission.all.map(\.rawValue).joined(separator: ", ")))"
                : "explain takes one PERMISSION, got \(arguments.positionals.count)", command: spec.name)
        }
        let permissions = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        let style = try OutputStyle.resolve(arguments, command: spec.name)
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let computed = try await LocalStatus.compute(permissions, reads, arguments, command: spec.name)
        let gate = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await reads.gate(permissions)
        }
        let rendering = StatusRendering(user: LocalStatus.user(of: computed), statuses: computed.permissions, gate: gate,
                                        time: HumanTime.now())
        console.out(rendering.verbose(), style: style)
        return .success
    }
}

/// `status`, `explain` and `check` through the contract, as the ledger can be read: root
/// reads it here (the engine in this process); anyone else gets the whole status from
/// devaccessd (as the kernel identifies them), or, when it cannot be reached, the engine's
/// here with the decisions unknown. Whose status a caller may see, the engine judges first.
enum LocalStatus {
    static func compute(_ permissions: [Permission], _ reads: EngineReads, _ arguments: ParsedArguments,
                        command: String) async throws -> StatusReply {
        let query = StatusQuery(permissions: permissions == Permission.all ? nil : permissions,
                                user: arguments.value("user"))
        let socketPath = try BrokerOptions.socketPath(arguments, command: command)
        return try await AdminAccess.call(command) { () throws(InterfaceError) in
            try await status(query, reads: reads, socketPath: socketPath)
        }
    }

    private static func status(_ query: StatusQuery, reads: EngineReads, socketPath: String) async throws(InterfaceError)
        -> StatusReply
    {
        let engine = reads.readingEngine()
        let subject = try engine.statusSubject(query)
        // A wrong --gpsd is a usage error even where devaccessd answers.
        _ = try reads.probeOptions()
        guard reads.ledgerIsPrivate else { return try await engine.status(query) }
        let asked = StatusQuery(permissions: query.permissions, user: subject.uid == getuid() ? nil : String(subject.uid))
        let broker: any DevAccessInterface = BrokerInterface(socketPath: socketPath, timeout: .seconds(10))
        do {
            return try await broker.status(asked)
        } catch {
            // devaccessd's refusal stands; anything else: the status here, the decisions unknown.
            if case .refused = error { throw error }
            let reason = if case .unreachable(let text) = error { text } else { error.description }
            var here = engine
            here.decisionsUnknown = "devaccessd not reachable (\(reason))"
            return try await here.status(query)
        }
    }

    /// Whose statuses these are, for the rendering (its name and uid).
    static func user(of reply: StatusReply) -> UserIdentity {
        UserIdentity(uid: reply.uid, name: reply.user, primaryGID: 0, groups: [])
    }
}

enum CheckCommand: Command {
    static let spec = CommandSpec(
        name: "check",
        abstract: "Exit with a code that tells the status of one permission; print nothing.",
        usage: "devaccess check PERMISSION [--user USER]",
        options: [CommonOptions.user, CommonOptions.gpsd, CommonOptions.gpsdTimeout, CommonOptions.stateDir],
        discussion: """
        \(CommonOptions.permissionsHelp)
        Exit codes: 0 authorized, 2 limited, 3 denied, 4 notDetermined, 5 restricted,
        6 unavailable, 1 error, 64 usage error.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count == 1 else {
            throw UsageError(message: arguments.positionals.isEmpty
                ? "missing PERMISSION (one of: \(Permission.all.map(\.rawValue).joined(separator: ", ")))"
                : "check takes one PERMISSION, got \(arguments.positionals.count)", command: spec.name)
        }
        let permission = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let statuses = try await LocalStatus.compute(permission, reads, arguments, command: spec.name).permissions
        guard let status = statuses.first else { return .failure }
        return ExitCode(status.status)
    }
}

enum DevicesCommand: Command {
    static let spec = CommandSpec(
        name: "devices",
        abstract: "List the hardware behind each permission and the state of its nodes.",
        usage: "devaccess devices [PERMISSION...] [--all] [--json]",
        options: [OptionSpec(long: "all", short: "a", value: nil,
                             help: "Also the nodes looked at and left out (radio, vbi, touch, output, metadata)."),
                  CommonOptions.json, CommonOptions.gpsd, CommonOptions.gpsdTimeout],
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, all are listed. The nodes that are no
        device of the permission are listed with --all (and always in --json, as notes).
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let permissions = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let reports = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await reads.devices(permissions)
        }
        if arguments.has("json") {
            console.out(StatusJSON.devices(reports))
        } else {
            console.out(TableOutput.devices(reports, skipped: arguments.has("all")))
        }
        return .success
    }
}

enum JSONOutput {
    static func encode(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

extension JSONOutput {
    /// One compact line, for streams (`monitor --json`).
    static func encodeLine(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
