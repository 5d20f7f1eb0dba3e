import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger

enum RevokeCommand: Command {
    static let spec = CommandSpec(
        name: "revoke",
        abstract: "End a user's grants for a permission (admin) and remove the ACL entries devaccess made.",
        usage: "devaccess revoke PERMISSION --user USER [--device ID]",
        options: [DecisionCommand.adminUser, DecisionCommand.device, DecisionCommand.reason, CommonOptions.stateDir],
        discussion: """
        \(CommonOptions.permissionsHelp)
        With --device, only grants made for that device end (a grant for every device stays;
        use 'devaccess deny PERMISSION --device ID' to shut one device out of it). Denials stay:
        forgetting them is 'devaccess reset'. USER may be the uid of a deleted account.
        An ACL change does not close descriptors already open: a program that has the device
        open keeps using it until it closes it.
        Needs root. Exit codes: 0 done (also when nothing was standing), 1 some node was
        refused or failed, 64 usage error, 74/75 ledger unusable/busy, 77 not root.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count == 1 else {
            throw UsageError(message: arguments.positionals.isEmpty ? "missing PERMISSION"
                : "revoke takes one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try CommonOptions.permissions(arguments.positionals, command: spec.name)[0]
        guard let userText = arguments.value("user") else {
            throw UsageError(message: "missing '--user USER' (whose grants end)", command: spec.name)
        }
        let subject = try AdminAccess.formerOrCurrentUser(userText, command: spec.name)
        try AdminAccess.requireRoot(spec.name)
        let engine = try AdminAccess.engine(arguments, command: spec.name)
        let deviceID = arguments.value("device")
        let outcome = try AdminAccess.run(spec.name) { () throws(EnforcementError) in
            try engine.revoke(permission: permission, subject: subject, deviceID: deviceID,
                              reason: arguments.value("reason") ?? "")
        }
        if outcome.revoked.isEmpty {
            console.error("devaccess: \(subject) has no standing \(permission.rawValue) grant"
                + (deviceID.map { " for device \($0)" } ?? "") + "; nothing was revoked")
        } else {
            console.out(outcome.revoked.map { "revoked " + EnforcementText.grantLine($0) }.joined(separator: "\n"))
        }
        for grant in outcome.stillCovering {
            console.error("devaccess: note: \(EnforcementText.grantLine(grant)) still covers that device; revoke "
                + "without --device, or 'devaccess deny \(permission.rawValue) --user \(subject.name) --device ID'")
        }
        return EnforcementText.print(outcome.report, console: console, quietWhenUnchanged: true)
    }
}
