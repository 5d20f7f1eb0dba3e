import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import DevAccessInterface
import FoundationEssentials
import Glibc
import DevAccessEngine

enum ListCommand: Command {
    static let spec = CommandSpec(
        name: "list",
        abstract: "List the decisions in the ledger (yours; everyone's for an admin).",
        usage: "devaccess list [--user USER] [--permission PERMISSION] [--all] [--json] [--no-pager]",
        options: [
            OptionSpec(long: "user", short: "u", value: "USER", help: "Only this user's decisions (name or uid)."),
            OptionSpec(long: "permission", short: "p", value: "PERMISSION", help: "Only this permission."),
            OptionSpec(long: "all", short: "a", value: nil, help: "Also decisions that ended (revoked, expired)."),
            CommonOptions.json,
            Pager.option,
        ] + AdminAccess.options,
        discussion: """
        Standing decisions, newest first: id, user, permission, decision, device, term, and
        who decided. The newest standing decision for a device is the one that applies.
        Anyone sees their own decisions; root and members of devaccess-admin see everyone's
        (and --user OTHER). \(AdminAccess.help)
        Exit codes: 0, 64 usage error, 69 devaccessd unreachable, 74/75 ledger unusable/busy,
        77 refused (another user's decisions).
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)' (filter with --permission)", command: spec.name)
        }
        let permission = try arguments.value("permission").map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: spec.name)[0]
        }
        if let missing = try AdminAccess.offlineLedgerIsMissing(arguments, command: spec.name) {
            if arguments.has("json") {
                console.out(try JSONOutput.encode(GrantListDocument(ledger: missing, grants: [], now: Date())))
            } else {
                console.error("devaccess: no decisions in \(missing) (the ledger does not exist yet)")
            }
            return .success
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name, readOnly: true)
        let query = ListQuery(user: arguments.value("user"), permission: permission, all: arguments.has("all"))
        let list = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.list(query) }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(list))
        } else if list.grants.isEmpty {
            console.error("devaccess: no \(arguments.has("all") ? "" : "standing ")decisions"
                + (arguments.value("user").map { " of \($0)" } ?? "") + " in \(list.ledger)")
        } else {
            Pager.show(table(list.grants, time: HumanTime.now()), arguments, console: console)
        }
        return .success
    }

    /// Times in local time, an end with the time left; `--json` keeps them UTC.
    static func table(_ grants: [GrantDocument], time: HumanTime) -> String {
        let header = ["ID", "USER", "PERMISSION", "DECISION", "DEVICE", "PROGRAM", "TERM", "STATE", "DECIDED BY"]
        let rows = grants.map { grant -> [String] in
            let state = grant.active ? "standing" : grant.ended.map { "ended " + time.rewritingISOTimes(in: $0) } ?? "expired"
            return [String(grant.id), "\(grant.user) (\(grant.uid))", grant.permissionText, grant.decision,
                    grant.device ?? "(every)", grant.program ?? "(every)",
                    grant.active ? time.rewritingISOTimes(in: grant.term) : grant.term, state, "\(grant.decidedBy) (\(grant.how))"].map(TerminalText.field)
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        return ([header] + rows).map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }.joined()
        }.joined(separator: "\n")
    }
}
