import DevAccessCore
import DevAccessInterface

/// Plain text for the commands that decide or record: data lines on stdout, problems
/// on stderr. Works on the result documents, which are the same whether devaccessd or
/// `--offline` produced them.
enum EnforcementText {
    /// Prints what changed, the drift and the notes; problems go to stderr. Returns
    /// `.failure` when a node was refused or an edit failed, else `.success`.
    static func print(_ report: EnforcementDocument, console: Console, quietWhenUnchanged: Bool = false) -> ExitCode {
        var lines: [String] = []
        for grant in report.expired {
            let term = grant.whilePid.map { "while pid \($0) ran" } ?? "until \(grant.expires ?? "?")"
            lines.append("expired grant \(grant.id): \(grant.user) \(grant.permission) (\(term))")
        }
        for ended in report.endedByPolicy {
            lines.append("ended grant \(ended.grant.id) by policy: \(ended.reason)")
        }
        lines += report.changes.map(\.message)
        if report.changedNothing && !quietWhenUnchanged { lines.append("nothing to change") }
        lines += report.drift.map { "drift: \($0.message)" }
        lines += report.notes.map { "note: \($0)" }
        if !lines.isEmpty { console.out(lines.joined(separator: "\n")) }
        printProblems(report, console: console)
        return report.hasProblems ? .failure : .success
    }

    static func printProblems(_ report: EnforcementDocument, console: Console) {
        for problem in report.problems {
            console.error("devaccess: \(problem.kind): \(problem.message)")
        }
    }
}
