import DevAccessCore
import DevAccessLedger

enum AuditCommand: Command {
    static let spec = CommandSpec(
        name: "audit",
        abstract: "Verify the ledger's hash-chained audit trail (admin).",
        usage: "devaccess audit --verify",
        options: [
            OptionSpec(long: "verify", short: nil, value: nil,
                       help: "Recompute the chain; name the first event edited, removed, reordered or inserted."),
            CommonOptions.stateDir,
        ],
        discussion: """
        Every audit event is chained: hash = SHA-256(previous hash || event). --verify walks the
        chain and prints 'audit chain intact: N events (LEDGER PATH)', or the first event that is not as it
        was written and how (edited, removed, reordered, inserted). The chain proves order and
        content up to its newest hash; the journal copy (DEVACCESS_HASH) anchors that hash
        outside the file. Audit reports (--since, --summary, formats) are not available yet.
        Needs root. Exit codes: 0 intact, 65 the chain is broken, 64 usage error, 74/75 ledger
        unusable (also: no ledger at all) / busy, 77 not root.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'", command: spec.name)
        }
        guard arguments.has("verify") else {
            throw UsageError(message: "missing '--verify' (audit reports are not available yet)", command: spec.name)
        }
        try AdminAccess.requireRoot(spec.name)
        let stateDirectory = try CommonOptions.stateDirectory(arguments, command: spec.name)
        guard let ledger = try AdminAccess.openExistingLedger(stateDirectory) else {
            throw CommandFailure(message: "no ledger at \(stateDirectory)/\(Ledger.fileName): nothing to verify "
                + "(if there was one, it was removed)", code: .ledgerUnusable)
        }
        let result: ChainVerification
        do {
            result = try ledger.verify()
        } catch {
            throw AdminAccess.failure(error)
        }
        switch result {
        case .intact:
            console.out("\(result) (\(ledger.path))")
            return .success
        case .broken(let chainBreak):
            console.out("audit chain broken at event \(chainBreak.seq) (\(chainBreak.kind.rawValue)): "
                + "\(chainBreak.explanation) (\(ledger.path))")
            return .auditBroken
        }
    }
}
