import DevAccessCore
import DevAccessInterface
import DevAccessProtocol

enum ResetCommand: Command {
    static let spec = CommandSpec(
        name: "reset",
        abstract: "Forget a user's decisions (admin), so the next request asks again (like tccutil reset).",
        usage: "devaccess reset [PERMISSION] --user USER",
        options: [DecisionCommand.adminUser, CommonOptions.json] + AdminAccess.options,
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, every permission is reset.
        Grants and denials are deleted from the ledger (the audit trail keeps a 'reset' event
        listing them), and the ACL entries devaccess made for them are removed.
        \(AdminAccess.help)
        Root and members of devaccess-admin only. Exit codes: 0 done, 1 some node was refused or
        failed, 64 usage error, 69 devaccessd unreachable, 74/75 ledger unusable/busy, 77 refused.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count <= 1 else {
            throw UsageError(message: "reset takes at most one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try arguments.positionals.first.map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: spec.name)[0]
        }
        let user = try AdminAccess.user(arguments, command: spec.name, purpose: "whose decisions to forget")
        let interface = try AdminAccess.interface(arguments, command: spec.name)
        let order = ResetOrder(user: user, permission: permission)
        let outcome = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.reset(order) }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(outcome))
            EnforcementText.printProblems(outcome.report, console: console)
            return outcome.report.hasProblems ? .failure : .success
        }
        let what = permission.map { "\($0.rawValue) decision(s)" } ?? "decision(s)"
        console.out("forgot \(outcome.deleted.count) \(what) of \(outcome.user) (\(outcome.uid))"
            + (outcome.deleted.isEmpty ? "" : ": grant " + outcome.deleted.map { String($0.id) }.joined(separator: ", ")))
        return EnforcementText.print(outcome.report, console: console, quietWhenUnchanged: true)
    }
}
