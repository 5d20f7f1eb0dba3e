import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation

enum ListCommand: Command {
    static let spec = CommandSpec(
        name: "list",
        abstract: "List the decisions in the ledger (admin).",
        usage: "devaccess list [--user USER] [--permission PERMISSION] [--all] [--json]",
        options: [
            OptionSpec(long: "user", short: "u", value: "USER", help: "Only this user's decisions (name or uid)."),
            OptionSpec(long: "permission", short: "p", value: "PERMISSION", help: "Only this permission."),
            OptionSpec(long: "all", short: "a", value: nil, help: "Also decisions that ended (revoked, expired)."),
            CommonOptions.json, CommonOptions.stateDir,
        ],
        discussion: """
        Standing decisions, newest first: id, user, permission, decision, device, term, and
        who decided. The newest standing decision for a device is the one that applies.
        Needs root. Exit codes: 0, 64 usage error, 74/75 ledger unusable/busy, 77 not root.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)' (filter with --permission)", command: spec.name)
        }
        let permission = try arguments.value("permission").map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: spec.name)[0]
        }
        let subject = try arguments.value("user").map { try AdminAccess.formerOrCurrentUser($0, command: spec.name) }
        try AdminAccess.requireRoot(spec.name)
        let stateDirectory = try CommonOptions.stateDirectory(arguments, command: spec.name)
        let now = Date()
        var grants: [Grant] = []
        let ledger = try AdminAccess.openExistingLedger(stateDirectory)
        if let ledger {
            do {
                grants = try ledger.grants(uid: subject?.uid, permission: permission, includeInactive: arguments.has("all"),
                                           now: now)
            } catch {
                throw AdminAccess.failure(error)
            }
        }
        let path = ledger?.path ?? stateDirectory + "/" + Ledger.fileName
        if arguments.has("json") {
            console.out(try JSONOutput.encode(GrantListDocument(ledger: path, grants: grants.map { GrantDocument($0, now: now) })))
        } else if grants.isEmpty {
            console.error("devaccess: no \(arguments.has("all") ? "" : "standing ")decisions in \(path)"
                + (ledger == nil ? " (the ledger does not exist yet)" : ""))
        } else {
            console.out(table(grants, now: now))
        }
        return .success
    }

    static func table(_ grants: [Grant], now: Date) -> String {
        let header = ["ID", "USER", "PERMISSION", "DECISION", "DEVICE", "TERM", "STATE", "DECIDED BY"]
        let rows = grants.map { grant -> [String] in
            let state = grant.isActive(at: now) ? "standing"
                : grant.revoked.map { "ended \(ISOTime.format($0))" } ?? "expired"
            return [String(grant.id), "\(grant.subject.name) (\(grant.subject.uid))", grant.permission.rawValue,
                    grant.decision.rawValue, grant.deviceID ?? "(every)", EnforcementText.term(grant), state,
                    "\(grant.decidedBy.name) (\(grant.method.rawValue))"]
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        return ([header] + rows).map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }.joined()
        }.joined(separator: "\n")
    }
}
