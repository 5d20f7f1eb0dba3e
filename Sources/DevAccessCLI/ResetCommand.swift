import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger

enum ResetCommand: Command {
    static let spec = CommandSpec(
        name: "reset",
        abstract: "Forget a user's decisions (admin), so the next request asks again (like tccutil reset).",
        usage: "devaccess reset [PERMISSION] --user USER",
        options: [DecisionCommand.adminUser, CommonOptions.stateDir],
        discussion: """
        \(CommonOptions.permissionsHelp) Without one, every permission is reset.
        Grants and denials are deleted from the ledger (the audit trail keeps a 'reset' event
        listing them), and the ACL entries devaccess made for them are removed.
        Needs root. Exit codes: 0 done, 1 some node was refused or failed, 64 usage error,
        74/75 ledger unusable/busy, 77 not root.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count <= 1 else {
            throw UsageError(message: "reset takes at most one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try arguments.positionals.first.map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: spec.name)[0]
        }
        guard let userText = arguments.value("user") else {
            throw UsageError(message: "missing '--user USER' (whose decisions to forget)", command: spec.name)
        }
        let subject = try AdminAccess.formerOrCurrentUser(userText, command: spec.name)
        try AdminAccess.requireRoot(spec.name)
        let engine = try AdminAccess.engine(arguments, command: spec.name)
        let outcome = try AdminAccess.run(spec.name) { () throws(EnforcementError) in
            try engine.reset(subject: subject, permission: permission)
        }
        let what = permission.map { "\($0.rawValue) decision(s)" } ?? "decision(s)"
        console.out("forgot \(outcome.deleted.count) \(what) of \(subject)"
            + (outcome.deleted.isEmpty ? "" : ": grant " + outcome.deleted.map { String($0.id) }.joined(separator: ", ")))
        return EnforcementText.print(outcome.report, console: console, quietWhenUnchanged: true)
    }
}
