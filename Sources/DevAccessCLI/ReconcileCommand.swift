import DevAccessArguments
import DevAccessCore
import DevAccessInterface
import FoundationEssentials
import Glibc

enum ReconcileCommand: Command {
    static let spec = CommandSpec(
        name: "reconcile",
        abstract: "Apply the ledger to the machine (admin) and report what changed and what drifted.",
        usage: "devaccess reconcile [--json]",
        options: [CommonOptions.json] + AdminAccess.options,
        discussion: """
        Ends grants whose time ran out; adds missing entries for standing grants (a node that
        was re-created on replug, an interrupted earlier run); removes the entries devaccess
        made that no grant stands behind; drops records of nodes that are gone. Entries
        devaccess did not make are never changed: they are reported as drift, as is access a
        denied user still has through a group. --json prints the report (docs/json.md).
        devaccessd also does this at start, on hotplug, at every expiry and once a minute.
        \(AdminAccess.help)
        Root and members of devaccess-admin only. Exit codes: 0 done (drift may remain), 1 some
        node was refused or an edit failed, 69 devaccessd unreachable, 74/75 ledger
        unusable/busy, 77 refused.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'", command: spec.name)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name)
        let report = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.reconcile() }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(report))
            EnforcementText.printProblems(report, console: console)
            return report.hasProblems ? .failure : .success
        }
        return EnforcementText.print(report, console: console)
    }
}
