import DevAccessCore
import DevAccessInterface
import DevAccessLedger
import Glibc

enum AuditCommand: Command {
    static let spec = CommandSpec(
        name: "audit",
        abstract: "Verify the ledger's hash-chained audit trail (admin).",
        usage: "devaccess audit --verify",
        options: [
            OptionSpec(long: "verify", short: nil, value: nil,
                       help: "Recompute the chain; name the first event edited, removed, reordered or inserted."),
            CommonOptions.json,
        ] + AdminAccess.options,
        discussion: """
        Every audit event is chained: hash = SHA-256(previous hash || event). --verify walks the
        chain and prints 'audit chain intact: N events (LEDGER PATH)', or the first event that is not as it
        was written and how (edited, removed, reordered, inserted). The chain proves order and
        content up to its newest hash; the journal copy (DEVACCESS_HASH) anchors that hash
        outside the file. Audit reports (--since, --summary, formats) are not available yet.
        \(AdminAccess.help)
        Root and members of devaccess-admin only. Exit codes: 0 intact, 65 the chain is broken,
        64 usage error, 69 devaccessd unreachable, 74/75 ledger unusable (also: no ledger at all,
        with --offline) / busy, 77 refused.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'", command: spec.name)
        }
        guard arguments.has("verify") else {
            throw UsageError(message: "missing '--verify' (audit reports are not available yet)", command: spec.name)
        }
        // Verifying must not create the ledger it is asked about.
        if let missing = try AdminAccess.offlineLedgerIsMissing(arguments, command: spec.name) {
            throw CommandFailure(message: "no ledger at \(missing): nothing to verify (if there was one, it was removed)",
                                 code: .ledgerUnusable)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name, readOnly: true)
        let result = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await interface.verifyAudit() }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(result))
        } else if result.intact {
            console.out("\(result.message) (\(result.ledger))")
        } else {
            console.out("audit chain broken at event \(result.brokenAt ?? 0) (\(result.kind ?? "?")): "
                + "\(result.explanation ?? "") (\(result.ledger))")
        }
        return result.intact ? .success : .auditBroken
    }
}
