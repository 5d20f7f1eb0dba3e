import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import FoundationEssentials
import Glibc

/// `devaccess policy check [DIR]`: does the policy parse, and does it name users, groups
/// and programs that exist? devaccessd refuses to start on a policy that does not parse,
/// and keeps the last good one when a file breaks while it runs.
enum PolicyCommand: Command {
    static let spec = CommandSpec(
        name: "policy",
        abstract: "Check the policy files (devaccess.conf and conf.d/*.conf) before devaccessd reads them.",
        usage: "devaccess policy check [DIR] [--json]",
        options: [CommonOptions.json],
        discussion: """
        DIR is the configuration directory (default: $DEVACCESS_CONFIG_DIR or /etc/devaccess).
        An error names the file and line and what is wrong; devaccessd refuses to start on
        such a policy, and while it runs keeps the last policy that parsed. Users, groups
        and programs that do not exist now are warnings: a rule naming them matches nobody.
        A Program= rule matches only a program whose executable and executable mappings are
        root's files (not one with a user's library in LD_PRELOAD), yet an interpreter runs
        any script and the grant is the user's: a boundary only for programs devaccess starts.
        Exit codes: 0 valid (warnings may be printed), 1 invalid, 64 usage error.
        """)

    struct Report: Encodable {
        var directory: String
        var valid: Bool
        var error: String?
        var rules: Int
        var warnings: [String]
    }

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.first == "check" else {
            throw UsageError(message: arguments.positionals.isEmpty ? "missing 'check'"
                : "unknown policy action '\(arguments.positionals[0])' (known: check)", command: spec.name)
        }
        guard arguments.positionals.count <= 2 else {
            throw UsageError(message: "policy check takes at most one DIR", command: spec.name)
        }
        let directory = arguments.positionals.count == 2 ? arguments.positionals[1] : PolicyFiles.directory(arguments.environment)
        var report = Report(directory: directory, valid: true, error: nil, rules: 0, warnings: [])
        do {
            let policy = try PolicyFiles.load(directory: directory)
            report.rules = policy.rules.count
            report.warnings = warnings(policy)
        } catch {
            report.valid = false
            report.error = error.description
        }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(report))
        } else if let error = report.error {
            console.error("devaccess: \(error)")
        } else {
            console.out("policy in \(directory) is valid: \(report.rules) rule(s)")
        }
        if !arguments.has("json") {
            for warning in report.warnings { console.error("devaccess: warning: \(warning)") }
        }
        return report.valid ? .success : .failure
    }

    static func warnings(_ policy: Policy) -> [String] {
        var warnings: [String] = []
        for rule in policy.rules {
            for user in rule.users where (try? UserDatabase.identity(for: user)) == nil {
                warnings.append("\(rule.origin): User=\(user) names no user on this machine; the rule matches nobody")
            }
            for group in rule.groups where UserDatabase.groupID(group) == nil {
                warnings.append("\(rule.origin): Group=\(group) names no group on this machine")
            }
            for program in rule.programs where access(program, X_OK) != 0 {
                warnings.append("\(rule.origin): Program=\(program) is not an executable here")
            }
            if !rule.programs.isEmpty && (rule.action == .allow) {
                warnings.append("\(rule.origin): Program= with Action=allow trusts a program whose files are root's "
                    + "(LD_PRELOAD of a user's library does not match), yet an interpreter runs any script and the "
                    + "grant is the user's, for all their programs; it is a boundary only for 'devaccess run'")
            }
        }
        return warnings
    }
}
