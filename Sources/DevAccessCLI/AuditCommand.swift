import DevAccessArguments
import DevAccessSystem
import FoundationEssentials
import DevAccessCore
import DevAccessInterface
import Glibc

enum AuditCommand: Command {
    static let spec = CommandSpec(
        name: "audit",
        abstract: "Report, verify or archive the ledger's hash-chained audit trail (admin).",
        usage: """
            devaccess audit [--since T] [--until T] [--user U] [--program P] [--permission P] [--device ID]
                                   [--type TYPE] [--summary | --event N | --follow] [--format table|json|csv|html] [--output FILE]
                                   [--archive-file FILE]...
                   devaccess audit --verify [--archive-file FILE] | --archive BEFORE [--to FILE]
            """,
        options: AuditReportCommand.options + [
            OptionSpec(long: "verify", short: nil, value: nil,
                       help: "Recompute the chain; name the first event edited, removed, reordered or inserted."),
            OptionSpec(long: "archive-file", short: nil, value: "FILE",
                       help: "With --verify: also verify this archive and its link to the ledger. With a report "
                           + "(repeatable): include the archive's events, its chain checked."),
            OptionSpec(long: "archive", short: nil, value: "BEFORE",
                       help: "Move events older than BEFORE (90d, 12w; or 2026-09-01T00:00Z) to an archive file."),
            OptionSpec(long: "to", short: nil, value: "FILE",
                       help: "With --archive: the new archive file (root only; default: the state directory)."),
            CommonOptions.json,
        ] + AdminAccess.options,
        discussion: """
        Every audit event is chained: hash = SHA-256(previous hash || event). --verify walks the
        chain and prints 'audit chain intact: N events (LEDGER PATH)', or the first event that is not as it
        was written and how (edited, removed, reordered, inserted). The chain proves order and
        content up to its newest hash; the journal copy (DEVACCESS_HASH) anchors that hash
        outside the file.

        Reports (no --verify, no --archive): the events matching every filter given, oldest first
        and newest last, one line each (event number, local time, user, program, permission,
        device, what happened, how it was decided, by whom). --summary counts them per permission
        and per user (requests, grants by consent / password / admin / policy, denials,
        revocations, expiries, refusals, drift found and repaired, hotplug, runs) and names the
        programs seen most, each row with the event numbers to look at; --event N prints one
        event in full with its place in the chain. --format json and csv are documented in
        docs/json.md (times in UTC there; tables show local time); --format html writes one
        self-contained page (summary tables, an SVG timeline per permission, nothing loaded). --follow keeps printing new
        events as they are written (with --format json: JSON Lines, the chain's state first).
        The chain is verified as the report reads the ledger: a broken chain is said on the
        report's first line and the exit code is 65.

        --archive BEFORE moves the oldest events, all of those written before BEFORE, into a new
        SQLite file (0600; by default audit-archive-TIME-FIRST-LAST.db in the state directory;
        --to FILE, root only, names a new file in a directory only root or you can change: an
        existing file or a symlink is refused). BEFORE is a duration (s, m, h, d, w: 90d means
        older than 90 days) or an ISO 8601 date-time as for 'grant --until'. The ledger keeps an
        'archived' event recording the range and the hash of the last moved event; its chain
        continues from that hash, so --verify still checks it, and --verify --archive-file FILE
        checks the archive's chain and that the ledger records it as it is. A broken chain is not
        archived. The ledger file keeps its size; new events reuse the freed space.
        \(AdminAccess.help)
        Root and members of devaccess-admin only. Exit codes: 0 intact / archived (or nothing old
        enough), 65 a chain is broken or the archive does not link, 64 usage error (also: a
        refused --to target), 69 devaccessd unreachable, 74/75 ledger unusable (also: no ledger
        at all, with --offline) / busy, 77 refused.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let word = arguments.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'", command: spec.name)
        }
        if arguments.value("archive") != nil {
            return try await archive(arguments, console: console)
        }
        guard arguments.has("verify") else {
            if arguments.value("to") != nil {
                throw UsageError(message: "'--to' goes with '--archive BEFORE'", command: spec.name)
            }
            return try await AuditReportCommand.run(arguments, console: console)
        }
        let reportOptions = AuditReportCommand.options.map(\.long).filter { arguments.has($0) || arguments.value($0) != nil }
        if let option = reportOptions.first {
            throw UsageError(message: "'--\(option)' is a report option; '--verify' checks the whole chain",
                             command: spec.name)
        }
        if arguments.value("to") != nil {
            throw UsageError(message: "'--to' goes with '--archive BEFORE'", command: spec.name)
        }
        // Verifying must not create the ledger it is asked about.
        if let missing = try AdminAccess.offlineLedgerIsMissing(arguments, command: spec.name) {
            throw CommandFailure(message: "no ledger at \(missing): nothing to verify (if there was one, it was removed)",
                                 code: .ledgerUnusable)
        }
        if arguments.allValues("archive-file").count > 1 {
            throw UsageError(message: "'--verify' checks one '--archive-file' at a time", command: spec.name)
        }
        let query = AuditVerifyQuery(archive: try arguments.value("archive-file").map { try absolute($0, "archive-file") })
        let interface = try AdminAccess.interface(arguments, command: spec.name, readOnly: true)
        let result = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await interface.verifyAudit(query)
        }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(result))
        } else {
            if result.intact {
                let start = result.archivedThrough.map { ", from event \($0 + 1) (older ones are archived)" } ?? ""
                console.out("\(result.message)\(start) (\(result.ledger))")
            } else {
                console.out("audit chain broken at event \(result.brokenAt ?? 0) (\(result.kind ?? "?")): "
                    + "\(result.explanation ?? "") (\(result.ledger))")
            }
            if let archive = result.archive { console.out("\(archive.message) (\(archive.path))") }
        }
        return result.allIntact ? .success : .auditBroken
    }

    private static func archive(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        for option in AuditReportCommand.options.map(\.long) where arguments.has(option) || arguments.value(option) != nil {
            throw UsageError(message: "'--\(option)' is a report option, not one of '--archive'", command: spec.name)
        }
        for conflicting in ["archive-file"] where arguments.value(conflicting) != nil {
            throw UsageError(message: "'--\(conflicting)' goes with '--verify', not with '--archive'", command: spec.name)
        }
        if arguments.has("verify") {
            throw UsageError(message: "'--archive BEFORE' and '--verify' are separate runs; to verify an archive: "
                + "'--verify --archive-file FILE'", command: spec.name)
        }
        let now = Date()
        let before = try before(arguments.value("archive") ?? "", now: now)
        let order = AuditArchiveOrder(beforeMilliseconds: Int64((before.timeIntervalSince1970 * 1000).rounded(.down)),
                                      to: try arguments.value("to").map { try absolute($0, "to") })
        if let missing = try AdminAccess.offlineLedgerIsMissing(arguments, command: spec.name) {
            throw CommandFailure(message: "no ledger at \(missing): nothing to archive", code: .ledgerUnusable)
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name, probesDevices: false)
        let result = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await interface.archiveAudit(order)
        }
        console.out(arguments.has("json") ? try JSONOutput.encode(result) : result.message)
        return .success
    }

    /// BEFORE: a duration back from now (`90d`), or an ISO 8601 date-time (`--until`'s grammar).
    static func before(_ text: String, now: Date) throws(UsageError) -> Date {
        if let seconds = try? DurationText.seconds(text) { return now.addingTimeInterval(-TimeInterval(seconds)) }
        guard let time = ISOTime.parse(text) else {
            throw UsageError(message: "'\(text)' is not a BEFORE for '--archive'; write a duration (90d, 12w, 36h: events "
                + "older than that) or an ISO 8601 date-time (2026-09-01T00:00Z, 2026-09-01T00:00 for local time)",
                             command: spec.name)
        }
        guard time <= now else {
            throw UsageError(message: "'--archive \(text)' is in the future; only events already written can be archived",
                             command: spec.name)
        }
        return time
    }

    /// Paths go to devaccessd, whose working directory is not ours: made absolute here.
    static func absolute(_ path: String, _ option: String) throws(UsageError) -> String {
        guard !path.isEmpty, !path.contains("\0") else {
            throw UsageError(message: "'--\(option)' needs a file", command: spec.name)
        }
        if path.hasPrefix("/") { return path }
        return FileManager.default.currentDirectoryPath + "/" + path
    }
}
