import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import DevAccessInterface

enum RevokeCommand: Command {
    static let spec = CommandSpec(
        name: "revoke",
        abstract: "End a user's grants for a permission (admin) and remove the ACL entries devaccess made.",
        usage: "devaccess revoke PERMISSION [--user USER] [--device ID] [--program PATH] [--terminate]",
        options: [ResetCommand.resetUser, DecisionCommand.device, DecisionCommand.program, terminate,
                  DecisionCommand.reason, CommonOptions.json] + AdminAccess.options,
        discussion: """
        \(CommonOptions.permissionsHelp)
        With --device, only grants made for that device end (a grant for every device stays;
        use 'devaccess deny PERMISSION --device ID' to shut one device out of it). Denials stay:
        forgetting them is 'devaccess reset'. USER may be the uid of a deleted account.
        With --program, only the program grants of PATH end.
        An ACL change does not close descriptors already open: a program that has the device
        open keeps using it until it closes it ('devaccess who' lists them). --terminate also
        ends the user's runs ('devaccess run') of the permission (of PATH with --program):
        every process carrying a run's group id, setsid'd descendants included, gets SIGTERM,
        and SIGKILL 5 seconds later; a process devaccess did not start is never signalled.
        \(AdminAccess.help)
        Without --user the grants are your own: anyone may revoke their own grants; others'
        only root and members of devaccess-admin.
        Exit codes: 0 done (also when nothing was standing), 1 some node was refused or failed,
        64 usage error, 69 devaccessd unreachable, 74/75 ledger unusable/busy, 77 refused.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.count == 1 else {
            throw UsageError(message: arguments.positionals.isEmpty ? "missing PERMISSION"
                : "revoke takes one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try CommonOptions.permissions(arguments.positionals, command: spec.name)[0]
        let user = try AdminAccess.userOrSelf(arguments, command: spec.name)
        if let reason = arguments.value("reason"), reason.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: spec.name)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name)
        let deviceID = try await DeviceOption.id(arguments, permission: permission, command: spec.name)
        let order = RevokeOrder(permission: permission, user: user, device: deviceID, reason: arguments.value("reason"),
                                program: try DecisionCommand.programPath(arguments, command: spec.name),
                                terminate: arguments.has("terminate"))
        let outcome = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.revoke(order) }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(outcome))
            EnforcementText.printProblems(outcome.report, console: console)
            return outcome.report.hasProblems ? .failure : .success
        }
        if outcome.revoked.isEmpty {
            console.error("devaccess: \(user) has no standing \(permission.rawValue) grant"
                + (deviceID.map { " for device \($0)" } ?? "") + "; nothing was revoked")
        } else {
            let time = HumanTime.now()
            console.out(outcome.revoked.map { "revoked " + time.rewritingISOTimes(in: $0.line, ends: false) }
                .joined(separator: "\n"))
        }
        for grant in outcome.stillCovering {
            console.error("devaccess: note: \(grant.line) still covers that device; revoke "
                + "without --device, or 'devaccess deny \(permission.rawValue) --user \(grant.user) --device ID'")
        }
        for ended in outcome.terminated ?? [] {
            console.out("ended run \(ended.run): process \(ended.pid) \(ended.ending)")
        }
        return EnforcementText.print(outcome.report, console: console, quietWhenUnchanged: true)
    }

    static let terminate = OptionSpec(long: "terminate", short: nil, value: nil,
        help: "Also end the user's runs ('devaccess run') that have the permission: SIGTERM, SIGKILL after 5 s.")
}
