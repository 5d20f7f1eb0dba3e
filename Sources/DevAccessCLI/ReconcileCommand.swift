import DevAccessCore
import DevAccessEnforcement
import Foundation

enum ReconcileCommand: Command {
    static let spec = CommandSpec(
        name: "reconcile",
        abstract: "Apply the ledger to the machine (admin) and report what changed and what drifted.",
        usage: "devaccess reconcile [--json]",
        options: [CommonOptions.json, CommonOptions.stateDir],
        discussion: """
        Ends grants whose time ran out; adds missing entries for standing grants (a node that
        was re-created on replug, an interrupted earlier run); removes the entries devaccess
        made that no grant stands behind; drops records of nodes that are gone. Entries
        devaccess did not make are never changed: they are reported as drift, as is access a
        denied user still has through a group. --json prints the report (docs/json.md).
        Needs root. Exit codes: 0 done (drift may remain), 1 some node was refused or an edit
        failed, 74/75 ledger unusable/busy, 77 not root.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'", command: spec.name)
        }
        try AdminAccess.requireRoot(spec.name)
        let engine = try AdminAccess.engine(arguments, command: spec.name)
        let report = try AdminAccess.run(spec.name) { () throws(EnforcementError) in try engine.reconcile() }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(EnforcementDocument(report, now: Date())))
            for problem in report.problems { console.error("devaccess: \(problem.kind.rawValue): \(problem.message)") }
            return report.problems.isEmpty ? .success : .failure
        }
        return EnforcementText.print(report, console: console)
    }
}
