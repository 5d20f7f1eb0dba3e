import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessSystem
import DevAccessInterface
import DevAccessEngine

/// The approval queue (policy auth_admin), through devaccessd: root and members of
/// devaccess-admin list every request, approve and reject; anyone else lists and
/// withdraws their own, and is refused (exit 77, recorded) the rest.
enum PendingCommand: Command {
    static let spec = CommandSpec(
        name: "pending",
        abstract: "List the requests waiting for an administrator's approval (yours; all for an admin).",
        usage: "devaccess pending [--json] [--socket PATH]",
        options: [CommonOptions.json] + AdminAccess.options,
        discussion: """
        Asks devaccessd (exit 69 when it cannot be reached): root and members of
        devaccess-admin see every waiting request, anyone else their own (which
        'devaccess withdraw ID' takes back). Each request: its ID (for 'devaccess
        approve ID' and 'reject ID'), the
        user and program the kernel identified, the permissions, the term asked for
        ('default': the policy's Keep=, else one use), when, and the reason given.
        \(ResolveCommand.offlineHelp)
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let extra = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(extra)'", command: spec.name)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name, readOnly: true)
        let list = try await ResolveCommand.call(spec.name) { () throws(InterfaceError) in try await interface.pending() }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(PendingDocument(requests: list.requests.map(PendingItemDocument.init))))
            return .success
        }
        guard !list.requests.isEmpty else {
            console.error("devaccess: no request \(Caller.thisProcess().may(.administer) ? "" : "of yours ")is waiting for approval")
            return .success
        }
        let time = HumanTime.now()
        let rows = list.requests.map { item -> [String] in
            let term = item.term.map { term in
                term.seconds.map { "for " + DurationText.format(seconds: $0) } ?? term.word.rawValue
            } ?? "default"
            return [String(item.pending), "\(item.user) (\(item.uid))",
                    item.permissions.map { $0 == .location && item.accuracy != nil
                        ? "location (\(item.accuracy?.rawValue ?? ""))" : $0.rawValue }.joined(separator: ","),
                    term, time.rewritingISOTimes(in: item.created),
                    TerminalText.field(item.program ?? "-"), TerminalText.field(item.reason ?? "")]
        }
        let header = ["ID", "USER", "PERMISSIONS", "TERM", "REQUESTED", "PROGRAM", "REASON"]
        var widths = header.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).enumerated().map { index, pair in
                index == cells.count - 1 ? pair.0 : pair.0.padded(to: pair.1)
            }.joined(separator: "  ")
        }
        console.out(([line(header)] + rows.map(line)).joined(separator: "\n"))
        return .success
    }
}

/// `approve ID` and `reject ID` share everything but the verb.
enum ResolveCommand {
    static let note = OptionSpec(long: "reason", short: nil, value: "TEXT",
                                 help: "A note for the audit trail and the grant (at most 1024 bytes).")
    static let deny = OptionSpec(long: "deny", short: nil, value: nil,
                                 help: "Record a denial (stays until 'devaccess reset'), not just decline this request.")

    /// The queue without devaccessd: root's repair mode, as for the other admin commands.
    static let offlineHelp = """
        With --offline (root only, devaccessd stopped) devaccess does it itself under the
        engine lock; nobody is waiting to be told then (exit 75 while devaccessd answers).
        """

    static func spec(approve: Bool) -> CommandSpec {
        CommandSpec(
            name: approve ? "approve" : "reject",
            abstract: approve ? "Grant what a pending request asks for (root or devaccess-admin)."
                : "Decline a pending request, or deny what it asks for (root or devaccess-admin).",
            usage: approve ? "devaccess approve ID [--once | --for DURATION | --always] [--reason TEXT] [--json] [--socket PATH]"
                : "devaccess reject ID [--deny] [--reason TEXT] [--json] [--socket PATH]",
            options: (approve ? [RequestCommand.once, RequestCommand.forDuration, RequestCommand.always, note,
                                 CommonOptions.json]
                : [deny, note, CommonOptions.json]) + AdminAccess.options,
            discussion: approve
                ? """
                ID is from 'devaccess pending'. Each permission is granted as your decision
                (how=admin) for the term you give (--once: while the process that asked runs;
                --for DURATION; --always), else the one the requester asked for, under the
                policy as it is now (MaxDuration= shortens it; a permission the policy now
                forbids is not granted). The requester's ACL entries are added at once, and a
                requester waiting with --wait is answered. Each permission's outcome is
                said on its own: one the policy forbids by now is not granted (restricted)
                and the others are. Exit 0 when every permission was granted; else, as
                'request', for the first that was not: 5 restricted, 4 not decided (a
                'once' with no process to last for); 1 an error (the message says what was
                recorded); 64 unknown or already resolved ID; 77 not root or
                devaccess-admin (recorded as refused); 69 devaccessd unreachable.
                \(offlineHelp)
                """
                : """
                ID is from 'devaccess pending'. Without --deny the request is declined: no
                decision is recorded, the requester is told, and their next request is
                queued again. With --deny each permission is denied as your decision
                (how=admin), and the denial stays until 'devaccess reset': the requester is
                not asked again. A requester waiting with --wait is answered. Exit 0; 64
                unknown or already resolved ID; 77 not root or devaccess-admin (recorded as
                refused); 69 devaccessd unreachable.
                \(offlineHelp)
                """)
    }

    static func run(_ arguments: ParsedArguments, console: Console, approve: Bool) async throws -> ExitCode {
        let name = approve ? "approve" : "reject"
        guard arguments.positionals.count == 1, let text = arguments.positionals.first else {
            throw UsageError(message: arguments.positionals.isEmpty ? "missing ID (see 'devaccess pending')"
                : "\(name) takes one ID", command: name)
        }
        guard let id = Int64(text), id > 0 else {
            throw UsageError(message: "'\(text)' is not a request ID (a positive number from 'devaccess pending')",
                             command: name)
        }
        let reason = arguments.value("reason")
        if let reason, reason.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: name)
        }
        let scope = approve ? try RequestCommand.requestedScope(arguments) : nil
        let interface = try AdminAccess.interface(arguments, command: name)
        let action = PendingAction(pending: id, reason: reason, scope: scope, deny: !approve && arguments.has("deny"))
        let resolved = try await call(name) { () throws(InterfaceError) in
            approve ? try await interface.approve(action) : try await interface.reject(action)
        }
        // What the verdict gives each permission; one that did not get it (the policy forbids
        // it by now, a 'once' with no process to last for) is said and sets the exit code.
        let expected: RequestOutcome = approve ? .granted : resolved.resolution == .declined ? .undecided : .denied
        let missed = resolved.results.filter { $0.outcome != expected }
        if arguments.has("json") {
            console.out(StatusJSON.resolved(resolved))
        } else {
            console.out("request \(resolved.pending) of \(resolved.user) (uid \(resolved.uid)) \(resolved.resolution.rawValue)")
            let time = HumanTime.now()
            for result in resolved.results {
                console.out("  \(result.permission.rawValue): "
                    + (result.outcome == expected ? "" : "\(result.outcome.rawValue): ")
                    + TerminalText.block(time.rewritingISOTimes(in: result.message)))
            }
        }
        guard let first = missed.first else { return .success }
        console.error("devaccess: request \(resolved.pending): not \(approve ? "granted" : "denied"): "
            + missed.map { "\($0.permission.rawValue) (\($0.outcome.rawValue))" }.joined(separator: ", "))
        return exitCode(first.outcome)
    }

    /// Runs one queue operation, with the queue's documented exit codes: 64 for a request
    /// that is not waiting (unknown or resolved already), 77 refused, 69 devaccessd not
    /// reached, 75 the ledger busy and 74 unusable (as every admin command); any other failure 1.
    static func call<R>(_ command: String, _ body: () async throws(InterfaceError) -> R) async throws -> R {
        do {
            return try await body()
        } catch {
            switch error {
            case .notFound(let text): throw CommandFailure(message: text, code: .usage)
            case .refused, .brokerBusy, .unreachable, .busy, .ledgerUnusable:
                throw AdminAccess.failure(error, command: command)
            default: throw CommandFailure(message: error.description)
            }
        }
    }

    /// The exit code of a permission the verdict did not give, as `request` exits with the
    /// status it leaves: 5 restricted, 4 no decision, 3 denied, 6 unavailable.
    static func exitCode(_ outcome: RequestOutcome) -> ExitCode {
        switch outcome {
        case .granted, .alreadyAllowed: return .success
        case .denied, .alreadyDenied: return .denied
        case .restricted: return .restricted
        case .unavailable: return .unavailable
        case .undecided, .pending: return .notDetermined
        }
    }
}

enum ApproveCommand: Command {
    static let spec = ResolveCommand.spec(approve: true)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        try await ResolveCommand.run(arguments, console: console, approve: true)
    }
}

enum RejectCommand: Command {
    static let spec = ResolveCommand.spec(approve: false)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        try await ResolveCommand.run(arguments, console: console, approve: false)
    }
}

/// `devaccess pending --json` (docs/json.md).
struct PendingDocument: Encodable {
    var requests: [PendingItemDocument]
}

struct PendingItemDocument: Encodable {
    var id: Int64
    var user: String
    var uid: UInt32
    var program: String?
    var permissions: [String]
    var reason: String?
    var term: String?
    var duration: Int64?
    var accuracy: String?
    var created: String

    init(_ item: PendingItem) {
        accuracy = item.accuracy?.rawValue
        id = item.pending
        user = item.user
        uid = item.uid
        program = item.program
        permissions = item.permissions.map(\.rawValue)
        reason = item.reason
        term = item.term?.word.rawValue
        duration = item.term?.seconds
        created = item.created
    }
}

/// `withdraw ID`: the requester takes back a request that waits for an administrator.
enum WithdrawCommand: Command {
    static let spec = CommandSpec(
        name: "withdraw",
        abstract: "Take back a request of yours that waits for an administrator.",
        usage: "devaccess withdraw ID [--reason TEXT] [--json]",
        options: [ResolveCommand.note, CommonOptions.json] + AdminAccess.options,
        discussion: """
        ID is from 'devaccess pending'. The request leaves the queue as 'withdrawn' (the
        audit trail keeps it); nothing is granted or denied, so a later request asks again.
        Your own requests only; root and members of devaccess-admin may withdraw any.
        \(AdminAccess.help)
        Exit codes: 0 withdrawn, 1 no such waiting request of yours, 64 usage error,
        69 devaccessd unreachable, 74/75 ledger unusable/busy.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count == 1, let text = arguments.positionals.first else {
            throw UsageError(message: arguments.positionals.isEmpty ? "missing ID (see 'devaccess pending')"
                : "withdraw takes one ID", command: spec.name)
        }
        guard let id = Int64(text), id > 0 else {
            throw UsageError(message: "'\(text)' is not a request ID (a positive number from 'devaccess pending')",
                             command: spec.name)
        }
        let reason = arguments.value("reason")
        if let reason, reason.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: spec.name)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name)
        let action = PendingAction(pending: id, reason: reason)
        let result = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.withdraw(action) }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(result))
        } else {
            console.out("request \(result.pending) of \(result.user) (uid \(result.uid)) \(result.resolution): "
                + result.permissions.joined(separator: ", "))
        }
        return .success
    }
}
