import DevAccessArguments
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessInterface

enum ResetCommand: Command {
    static let spec = CommandSpec(
        name: "reset",
        abstract: "Forget decisions, so the next request asks again (like tccutil reset).",
        usage: "devaccess reset [PERMISSION] [--user USER]",
        options: [resetUser, CommonOptions.json] + AdminAccess.options,
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, every permission is reset.
        Grants and denials are deleted from the ledger (the audit trail keeps a 'reset' event
        listing them), and the ACL entries devaccess made for them are removed.
        Without --user it is your own: you may forget what you decided yourself at a prompt
        (your "deny", and what you allowed), through devaccessd; a denial an administrator
        recorded is refused (77, audited) and stays until an administrator resets it.
        \(AdminAccess.help)
        Another user's decisions: root and members of devaccess-admin only. Exit codes: 0 done,
        1 some node was refused or failed, 64 usage error, 69 devaccessd unreachable, 74/75
        ledger unusable/busy, 77 refused.
        """)

    static let resetUser = OptionSpec(long: "user", short: "u", value: "USER",
                                      help: "Whose decisions (name or uid); default yourself.")

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count <= 1 else {
            throw UsageError(message: "reset takes at most one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try arguments.positionals.first.map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: spec.name)[0]
        }
        let user = try AdminAccess.userOrSelf(arguments, command: spec.name)
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
