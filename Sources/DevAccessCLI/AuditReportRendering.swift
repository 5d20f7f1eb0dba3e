import DevAccessArguments
import DevAccessCore
import DevAccessInterface
import FoundationEssentials
import Glibc
import DevAccessSystem

/// Where a report goes: standard output, `--output FILE` (created 0600: audit data is
/// private; an existing file is replaced, a symlink is refused), or, for a table on a
/// terminal, a pager (Pager: `$DEVACCESS_PAGER`, `$PAGER`, else `less -FRX`).
final class ReportSink {
    private var descriptor: CInt
    /// `--output`'s file, owned here (closed by `finish`).
    private var file: FileDescriptor?
    private var pager: Pager?

    /// `pager`: page on a terminal (Pager decides whether and with what).
    init(path: String?, pager arguments: ParsedArguments? = nil) throws {
        if let path {
            let opened: FileDescriptor
            do {
                opened = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
            } catch {
                throw CommandFailure(message: "cannot write the report: \(error)", code: .failure)
            }
            descriptor = opened.rawValue
            file = consume opened
            return
        }
        pager = arguments.flatMap(Pager.start)
        descriptor = pager?.descriptor ?? STDOUT_FILENO
    }

    deinit { finish() }

    /// Closes the file or the pager's pipe, and waits for the pager to quit.
    func finish() {
        file = nil
        descriptor = STDOUT_FILENO
        pager?.finish()
        pager = nil
    }

    /// Writes `text` as is; nothing is added.
    func write(_ text: String) {
        FileDescriptor.writeAll(descriptor, text)
    }

    func line(_ text: String) { write(text + "\n") }
}

/// `--format`: how events and summaries are written.
enum ReportFormat: String, CaseIterable {
    case table, json, csv, html
}

/// The sentence a report starts with when the chain does not verify.
enum ChainNotice {
    static func broken(_ chain: AuditVerifyDocument) -> String {
        "WARNING: the audit chain is broken at event \(chain.brokenAt ?? 0) (\(chain.kind ?? "?")): "
            + "\(chain.explanation ?? ""). Events from there on may have been edited, removed or inserted "
            + "(devaccess audit --verify)."
    }

    static func broken(_ archive: ArchiveVerifyDocument) -> String {
        var text = "WARNING: the archive \(archive.path) "
        if let seq = archive.brokenAt {
            text += "is broken at event \(seq) (\(archive.kind ?? "?")): \(archive.explanation ?? "")"
        } else {
            text += "is not recorded in the ledger as it is: \(archive.linkExplanation ?? archive.link)"
        }
        return text + ". Its events may have been edited, removed or inserted (devaccess audit --verify --archive-file)."
    }

    /// What a report says first: every chain it read that does not verify (none: nothing).
    static func warnings(_ document: AuditReportDocument) -> [String] {
        (document.chain.flatMap { $0.intact ? nil : [broken($0)] } ?? [])
            + (document.archives ?? []).filter { !$0.intact }.map(broken)
    }
}

/// One line per event for people: local time, who, what, how, by whom.
enum EventTable {
    static let header = ["#", "TIME", "USER", "PROGRAM", "PERMISSION", "DEVICE", "WHAT", "HOW", "BY"]
    /// Minimum widths, so pages of a long report line up.
    static let widths = [6, 19, 16, 24, 10, 20, 16, 10, 0]

    /// The summary's word for a method where it differs from the ledger's (`auth_self`).
    static let methodWords = ["auth_self": "password"]

    static func row(_ event: AuditEventDocument) -> [String] {
        var what = event.type
        if let decision = event.decision { what += " " + decision }
        if event.type == "refused", let operation = event.details["operation"] { what += " " + operation }
        // A request writes a row at each stage (received, prompt, answered): say which.
        if event.type == "request", let stage = event.details["stage"] { what += " " + stage }
        // How it was decided; for a request its outcome, or the term asked for when received;
        // for a revoke what ended it.
        var how = event.how.map { methodWords[$0] ?? $0 } ?? ""
        if event.type == "request" { how = event.details["outcome"] ?? event.details["scope"] ?? "" }
        if event.type == "revoke" { how = event.details["ended_by"].map { "by " + $0 } ?? "" }
        let user = event.user.map { name in event.uid.map { "\(name) (\($0))" } ?? name } ?? "-"
        return [String(event.seq), AuditTimeWords.local(microseconds: event.timeUsec), user,
                event.program.map(shortProgram) ?? "-", event.permission ?? "-",
                event.device.map { shortDevice($0, permission: event.permission) } ?? event.deviceName ?? "-", what, how.isEmpty ? "-" : how, event.actor ?? "-"]
    }

    static func format(_ cells: [String]) -> String {
        // Each cell on its one line: a newline in a program's path or a name adds no row.
        cells.map(TerminalText.field).enumerated().map { index, cell in
            index == cells.count - 1 ? cell : cell + String(repeating: " ", count: max(1, widths[index] - cell.count + 2))
        }.joined()
    }

    /// The id without its permission's prefix, as `status` shows it: one word per device on
    /// every row (events record its name on some only; `--event N` shows it).
    static func shortDevice(_ id: String, permission: String?) -> String {
        guard let permission, id.hasPrefix(permission + ":") else { return id }
        return String(id.dropFirst(permission.count + 1))
    }

    /// The last two components: `/usr/bin/cheese` stays readable, `/opt/x/bin/app` keeps its context.
    static func shortProgram(_ path: String) -> String {
        let parts = path.split(separator: "/")
        return parts.count <= 2 ? path : "…/" + parts.suffix(2).joined(separator: "/")
    }
}

/// RFC 4180 CSV: a header row, then one row per event (docs/json.md lists the columns).
enum EventCSV {
    static let columns = ["seq", "time_utc", "time_usec", "type", "actor", "actor_uid", "user", "uid", "permission",
                          "device", "device_name", "program", "node", "decision", "how", "details", "prev_hash", "hash"]

    static func row(_ event: AuditEventDocument) -> String {
        let details = compactJSON(event.details)
        return line([String(event.seq), event.time, String(event.timeUsec), event.type, event.actor ?? "",
                     event.actorUid.map(String.init) ?? "", event.user ?? "", event.uid.map(String.init) ?? "",
                     event.permission ?? "", event.device ?? "", event.deviceName ?? "", event.program ?? "",
                     event.node ?? "", event.decision ?? "", event.how ?? "", details, event.prevHash, event.hash])
    }

    /// The details as compact JSON with sorted keys (as the ledger stores them), byte-wise:
    /// no JSONEncoder and no Character comparisons per row.
    static func compactJSON(_ details: [String: String]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        func quoted(_ text: String) {
            out.append(UInt8(ascii: "\""))
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), byte]
                case UInt8(ascii: "\n"): out += Array("\\n".utf8)
                case UInt8(ascii: "\r"): out += Array("\\r".utf8)
                case UInt8(ascii: "\t"): out += Array("\\t".utf8)
                case 0..<0x20, 0x7F:
                    let hex = String(byte, radix: 16)
                    out += Array(("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).utf8)
                default: out.append(byte)
                }
            }
            out.append(UInt8(ascii: "\""))
        }
        for (index, pair) in details.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            quoted(pair.key)
            out.append(UInt8(ascii: ":"))
            quoted(pair.value)
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Control characters in cells (device names come from hardware) are shown as `\xNN`, as in tables.
    static func line(_ cells: [String]) -> String {
        cells.map { quoted(TerminalText.block($0)) }.joined(separator: ",") + "\r\n"
    }

    /// Byte-wise: a million rows of Character comparisons cost seconds.
    static func quoted(_ cell: String) -> String {
        guard cell.utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) else { return cell }
        var bytes: [UInt8] = [0x22]
        bytes.reserveCapacity(cell.utf8.count + 8)
        for byte in cell.utf8 {
            bytes.append(byte)
            if byte == 0x22 { bytes.append(0x22) }
        }
        bytes.append(0x22)
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// `--summary` as tables, CSV rows, or its JSON document.
enum SummaryRendering {
    static let countColumns = ["events", "requests", "grants_consent", "grants_password", "grants_admin", "grants_policy",
                               "denials", "revocations", "expiries", "resets", "refusals", "queued", "drift_found",
                               "drift_repaired", "hotplug", "runs", "run_seconds", "first_event", "last_event"]

    static func values(_ counts: AuditCounts) -> [String] {
        [counts.events, counts.requests, counts.grantsConsent, counts.grantsPassword, counts.grantsAdmin,
         counts.grantsPolicy, counts.denials, counts.revocations, counts.expiries, counts.resets, counts.refusals,
         counts.queued, counts.driftFound, counts.driftRepaired, counts.hotplug, counts.runs, counts.runSeconds]
            .map(String.init)
            + [counts.firstEvent.map(String.init) ?? "", counts.lastEvent.map(String.init) ?? ""]
    }

    static func csv(_ summary: AuditSummary) -> String {
        var out = EventCSV.line(["section", "key", "uid"] + countColumns)
        out += EventCSV.line(["total", "", ""] + values(summary.total))
        for row in summary.permissions { out += EventCSV.line(["permission", row.key, ""] + values(row.counts)) }
        for row in summary.users {
            out += EventCSV.line(["user", row.key, row.uid.map(String.init) ?? ""] + values(row.counts))
        }
        for program in summary.programs {
            var cells = ["program", program.program, "", String(program.events)]
            cells += Array(repeating: "", count: countColumns.count - 3)
            cells += [String(program.firstEvent), String(program.lastEvent)]
            out += EventCSV.line(cells)
        }
        return out
    }

    static func table(_ summary: AuditSummary) -> String {
        let header = ["", "EVENTS", "REQUESTS", "GRANTED c/p/a/pol", "DENIED", "REVOKED", "EXPIRED", "REFUSED",
                      "DRIFT found/fixed", "HOTPLUG", "RUNS", "EVENT NUMBERS"]
        func cells(_ name: String, _ counts: AuditCounts) -> [String] {
            let range = counts.firstEvent.map { first in
                counts.lastEvent.map { $0 == first ? "#\(first)" : "#\(first)…#\($0)" } ?? "#\(first)"
            } ?? "-"
            return [name, String(counts.events), String(counts.requests),
                    "\(counts.grants) (\(counts.grantsConsent)/\(counts.grantsPassword)/\(counts.grantsAdmin)/"
                        + "\(counts.grantsPolicy))",
                    String(counts.denials), String(counts.revocations), String(counts.expiries), String(counts.refusals),
                    "\(counts.driftFound)/\(counts.driftRepaired)", String(counts.hotplug),
                    counts.runs == 0 ? "0" : "\(counts.runs) (\(DurationText.format(seconds: counts.runSeconds)))", range]
        }
        var sections: [String] = []
        var permissionHeader = header
        permissionHeader[0] = "PERMISSION"
        sections.append(align([permissionHeader] + summary.permissions.map { cells($0.key, $0.counts) }
            + [cells("(all)", summary.total)]))
        var userHeader = header
        userHeader[0] = "USER"
        sections.append(align([userHeader] + summary.users.map { row in
            cells(row.uid.map { "\(row.key) (\($0))" } ?? row.key, row.counts)
        }))
        if !summary.programs.isEmpty {
            sections.append(align([["PROGRAM", "EVENTS", "EVENT NUMBERS"]] + summary.programs.map {
                [$0.program, String($0.events), $0.firstEvent == $0.lastEvent ? "#\($0.firstEvent)"
                    : "#\($0.firstEvent)…#\($0.lastEvent)"]
            }))
        }
        return TerminalText.block(sections.joined(separator: "\n\n")) + "\n\n"
            + "granted c/p/a/pol: by consent / password (auth_self) / admin / policy. "
            + "'devaccess audit --event N' shows one event; filter with --permission, --user, --type to list them.\n"
    }

    static func align(_ rows: [[String]]) -> String {
        // Program paths and user names are whatever a user made them: each cell on one line.
        let rows = rows.map { $0.map(TerminalText.field) }
        let widths = (rows.first ?? []).indices.map { column in rows.map { $0.indices.contains(column) ? $0[column].count : 0 }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }.joined()
        }.joined(separator: "\n")
    }
}

/// `--event N` for people: every field, then where it sits in the chain.
enum EventRecordText {
    static func text(_ event: AuditEventDocument, _ position: AuditChainPosition?) -> String {
        var lines: [(String, String)] = [
            ("event", String(event.seq)), ("time", AuditTimeWords.local(microseconds: event.timeUsec) + " (\(event.time))"),
            ("type", event.type),
        ]
        func add(_ key: String, _ value: String?) { if let value { lines.append((key, value)) } }
        add("actor", event.actor.map { name in event.actorUid.map { "\(name) (uid \($0))" } ?? name })
        add("user", event.user.map { name in event.uid.map { "\(name) (uid \($0))" } ?? name })
        add("permission", event.permission)
        add("device", event.device.map { id in event.deviceName.map { "\($0) [\(id)]" } ?? id })
        add("program", event.program)
        add("node", event.node)
        for (key, value) in event.details.sorted(by: { $0.key < $1.key }) { lines.append(("  " + key, value)) }
        lines.append(("prev_hash", event.prevHash))
        lines.append(("hash", event.hash))
        if let position {
            let recomputed = position.hashMatches ? "matches its stored fields" : "DOES NOT match its stored fields (edited)"
            lines.append(("chain", "event \(position.seq) of \(position.firstStored)…\(position.head) stored; hash \(recomputed)"))
            lines.append(("  previous", position.linksToPrevious.map { $0 ? "event \(position.seq - 1) links to it"
                : "event \(position.seq - 1) has a different hash (broken link)" } ?? "none stored (first, or archived)"))
            lines.append(("  next", position.linkedFromNext.map { $0 ? "event \(position.seq + 1) is chained to it"
                : "event \(position.seq + 1) is chained to a different hash (broken link)" } ?? "none (newest)"))
        }
        let width = (lines.map(\.0.count).max() ?? 0) + 2
        return lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count) + TerminalText.field($0.1) }
            .joined(separator: "\n")
    }
}
