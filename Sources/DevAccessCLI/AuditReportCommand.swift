import DevAccessArguments
import DevAccessCore
import DevAccessInterface
import DevAccessEngine
import FoundationEssentials
import Glibc

/// `devaccess audit` without --verify/--archive: the report. It reads through the
/// interface (devaccessd, or the engine here with --offline) a page at a time, so a report
/// of any length streams in replies under the protocol's 1 MiB limit; the first page
/// carries the chain's state, which the report prints first when the chain is broken.
enum AuditReportCommand {
    static let options = [
        OptionSpec(long: "since", short: nil, value: "TIME", help: "Events at or after TIME: \(AuditTimeWords.help)."),
        OptionSpec(long: "until", short: nil, value: "TIME", help: "Events before TIME (same words)."),
        OptionSpec(long: "user", short: "u", value: "USER", help: "Events about or caused by USER (name or uid)."),
        OptionSpec(long: "program", short: nil, value: "PROGRAM", help: "Events naming PROGRAM (full path or file name)."),
        OptionSpec(long: "permission", short: "p", value: "PERMISSION", help: "Events of one permission."),
        OptionSpec(long: "device", short: nil, value: "ID", help: "Events of one device (stable id or name)."),
        OptionSpec(long: "type", short: nil, value: "TYPE[,TYPE]",
                   help: "Events of these types (request, decision, grant, revoke, expiry, refused, ...); grant includes decision."),
        OptionSpec(long: "summary", short: nil, value: nil, help: "Counts per permission, per user, top programs."),
        OptionSpec(long: "event", short: nil, value: "N", help: "One event in full, with its place in the chain."),
        OptionSpec(long: "format", short: nil, value: "FORMAT",
                   help: "table (default), json, csv, or html (one self-contained page with a timeline)."),
        OptionSpec(long: "output", short: "o", value: "FILE", help: "Write the report to FILE (0600) instead of stdout."),
        Pager.option,
        OptionSpec(long: "follow", short: "f", value: nil,
                   help: "Keep reading: print new events as they are written (JSON Lines with --format json)."),
    ]

    /// How long one `--follow` request is held by devaccessd while nothing new is written
    /// (it answers as soon as an event is; then the next request is sent).
    static let followWait: Int64 = 25

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let command = AuditCommand.spec.name
        let format = try format(arguments)
        var query = try query(arguments, now: Date())
        let modes = ["summary", "event", "follow"].filter { arguments.has($0) || arguments.value($0) != nil }
        if modes.count > 1 {
            throw UsageError(message: "'--\(modes[0])' and '--\(modes[1])' are separate reports", command: command)
        }
        if arguments.has("json") {
            throw UsageError(message: "reports take '--format json' (--json goes with --verify and --archive)",
                             command: command)
        }
        if let text = arguments.value("event") {
            guard let seq = Int64(text), seq > 0 else {
                throw UsageError(message: "'--event \(text)' is not an event number (the # column of a report)",
                                 command: command)
            }
            query.mode = .event
            query.event = seq
        } else if arguments.has("summary") {
            query.mode = .summary
        }
        if let missing = try AdminAccess.offlineLedgerIsMissing(arguments, command: command) {
            throw CommandFailure(message: "no ledger at \(missing): nothing to report", code: .ledgerUnusable)
        }
        if format == .html && (query.mode == .event || arguments.has("follow")) {
            throw UsageError(message: "'--format html' is a whole report: not with --event or --follow", command: command)
        }
        let interface = try AdminAccess.interface(arguments, command: command, readOnly: true)
        let sink = try ReportSink(path: arguments.value("output"),
                                  pager: format == .table && !arguments.has("follow") ? arguments : nil)
        defer { sink.finish() }
        if format == .html {
            return try await html(interface, query, arguments: arguments, sink: sink)
        }
        switch query.mode {
        case .summary:
            let document = try await fetch(interface, query)
            let warnings = ChainNotice.warnings(document)
            switch format {
            case .json, .html: sink.line(try JSONOutput.encode(document))
            case .csv:
                for warning in warnings { sink.line("# " + warning) }
                sink.write(SummaryRendering.csv(document.summary ?? AuditSummary()))
            case .table:
                for warning in warnings { sink.line(warning + "\n") }
                sink.write(SummaryRendering.table(document.summary ?? AuditSummary()))
            }
            let broken = !warnings.isEmpty
            return broken ? .auditBroken : .success
        case .event:
            let document = try await fetch(interface, query)
            if format == .json {
                sink.line(try JSONOutput.encode(document))
            } else if let event = document.event {
                for warning in ChainNotice.warnings(document) { sink.line(warning + "\n") }
                if format == .csv {
                    sink.write(EventCSV.line(EventCSV.columns) + EventCSV.row(event))
                } else {
                    sink.line(EventRecordText.text(event, document.position))
                }
            }
            let suspect = !ChainNotice.warnings(document).isEmpty
                || document.position.map { !$0.hashMatches || $0.linksToPrevious == false || $0.linkedFromNext == false }
                ?? false
            return suspect ? .auditBroken : .success
        case .events:
            return try await events(interface, query, format: format, follow: arguments.has("follow"),
                                    sinceGiven: arguments.value("since") != nil, sink: sink)
        }
    }

    /// Pages through the events; with `follow`, keeps asking for newer ones until interrupted.
    private static func events(_ interface: any DevAccessInterface, _ start: AuditReportQuery, format: ReportFormat,
                               follow: Bool, sinceGiven: Bool, sink: ReportSink) async throws -> ExitCode {
        var query = start
        var first = try await fetch(interface, query)
        let chain = first.chain
        let warnings = ChainNotice.warnings(first)
        let broken = !warnings.isEmpty
        // Following without --since starts at the newest event: what is written from now on.
        if follow && !sinceGiven {
            query.after = first.head ?? 0
            query.verify = false
            first = try await fetch(interface, query)
        }
        switch format {
        case .table, .html:
            for warning in warnings { sink.line(warning + "\n") }
            // A report with no event says so instead of a header over nothing (emit prints it).
            if follow { sink.line(EventTable.format(EventTable.header)) }
        case .csv:
            for warning in warnings { sink.line("# " + warning) }
            sink.write(EventCSV.line(EventCSV.columns))
        case .json:
            if follow {
                // JSON Lines: the chain's state first, then one event per line.
                sink.line(try JSONOutput.encodeLine(FollowHeader(ledger: first.ledger, chain: chain, archives: first.archives)))
            } else {
                let archives = try first.archives.map { ",\"archives\":" + (try JSONOutput.encodeLine($0)) } ?? ""
                sink.write("{\"chain\":\(try chain.map { try JSONOutput.encodeLine($0) } ?? "null")\(archives),"
                    + "\"ledger\":\(try JSONOutput.encodeLine(first.ledger)),\"mode\":\"events\",\"events\":[\n")
            }
        }
        var wroteOne = false
        // One encoder for every line (making one per event costs more than the encoding).
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func emit(_ page: AuditReportDocument) throws {
            for event in page.events ?? [] {
                switch format {
                case .table, .html:
                    if !wroteOne && !follow { sink.line(EventTable.format(EventTable.header)) }
                    sink.line(EventTable.format(EventTable.row(event)))
                case .csv: sink.write(EventCSV.row(event))
                case .json:
                    let line = String(decoding: try encoder.encode(event), as: UTF8.self)
                    if follow {
                        sink.line(line)
                    } else {
                        sink.write((wroteOne ? ",\n" : "") + line)
                    }
                }
                wroteOne = true
            }
        }
        var page = first
        try emit(page)
        query.verify = false
        while true {
            if let next = page.next {
                query.after = next
            } else if follow {
                // Everything up to the head was matched already: the next request starts after
                // it, and devaccessd holds it until something is written.
                query.after = max(query.after, page.events?.last?.seq ?? 0, page.head ?? 0)
                query.waitSeconds = followWait
            } else {
                break
            }
            page = try await fetch(interface, query)
            try emit(page)
        }
        if format == .json && !follow { sink.write("\n]}\n") }
        if (format == .table || format == .html) && !follow && !wroteOne { sink.line("no events") }
        return broken ? .auditBroken : .success
    }

    /// The summary (with the chain's state), then every matching event into the timeline.
    private static func html(_ interface: any DevAccessInterface, _ start: AuditReportQuery,
                             arguments: ParsedArguments, sink: ReportSink) async throws -> ExitCode {
        var query = start
        query.mode = .summary
        let summary = try await fetch(interface, query)
        query.mode = .events
        query.verify = false
        query.timeline = true
        // The timeline draws only these; the tables above counted everything.
        let drawn = AuditTimeline.types
        query.types = start.types.isEmpty ? drawn : start.types.filter { drawn.contains($0) }
        let timeline = AuditTimeline()
        // --type naming none of them: nothing to draw (an empty list would mean every type).
        while !query.types.isEmpty {
            let page = try await fetch(interface, query)
            for event in page.events ?? [] { timeline.add(event) }
            guard let next = page.next else { break }
            query.after = next
        }
        timeline.finish()
        let events = try await eventRows(interface, start, limit: AuditHTMLReport.eventLimit)
        let filters = ["since", "until", "user", "program", "permission", "device", "type"].compactMap { option in
            arguments.value(option).map { "--\(option) \($0)" }
        }
        let to = start.untilMilliseconds.map { $0 * 1000 } ?? AuditHTMLReport.now()
        sink.write(AuditHTMLReport.page(ledger: summary.ledger, chain: summary.chain, archives: summary.archives ?? [],
                                        summary: summary.summary ?? AuditSummary(),
                                        timeline: timeline, filters: filters.isEmpty ? "none" : filters.joined(separator: " "),
                                        from: start.sinceMilliseconds.map { $0 * 1000 }, to: to,
                                        events: events, eventCount: summary.summary?.total.events ?? 0))
        return ChainNotice.warnings(summary).isEmpty ? .success : .auditBroken
    }

    /// The first `limit` matching events, as the table's rows.
    private static func eventRows(_ interface: any DevAccessInterface, _ start: AuditReportQuery,
                                  limit: Int) async throws -> [[String]] {
        var query = start
        query.mode = .events
        query.verify = false
        query.timeline = false
        var rows: [[String]] = []
        while rows.count < limit {
            let page = try await fetch(interface, query)
            rows += (page.events ?? []).prefix(limit - rows.count).map(EventTable.row)
            guard let next = page.next else { break }
            query.after = next
        }
        return rows
    }

    struct FollowHeader: Encodable {
        var ledger: String
        var chain: AuditVerifyDocument?
        var archives: [ArchiveVerifyDocument]?
    }

    private static func fetch(_ interface: any DevAccessInterface, _ query: AuditReportQuery) async throws
        -> AuditReportDocument
    {
        try await AdminAccess.call(AuditCommand.spec.name) { () throws(InterfaceError) in
            try await interface.auditReport(query)
        }
    }

    static func format(_ arguments: ParsedArguments) throws(UsageError) -> ReportFormat {
        guard let text = arguments.value("format") else { return .table }
        guard let format = ReportFormat(rawValue: text.lowercased()) else {
            throw UsageError(message: "'--format \(text)' is not a report format; use "
                + ReportFormat.allCases.map(\.rawValue).joined(separator: ", "), command: AuditCommand.spec.name)
        }
        return format
    }

    /// The filters, with time words resolved here (the admin's time zone).
    static func query(_ arguments: ParsedArguments, now: Date) throws(UsageError) -> AuditReportQuery {
        let command = AuditCommand.spec.name
        func time(_ option: String) throws(UsageError) -> Int64? {
            guard let text = arguments.value(option) else { return nil }
            guard let date = AuditTimeWords.resolve(text, now: now) else {
                throw UsageError(message: "'--\(option) \(text)' is not a time; write \(AuditTimeWords.help)",
                                 command: command)
            }
            return Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        }
        let since = try time("since"), until = try time("until")
        if let since, let until, since >= until {
            throw UsageError(message: "'--since' is not before '--until': no event can match", command: command)
        }
        let permission = try arguments.value("permission").map { word throws(UsageError) in
            try CommonOptions.permissions([word], command: command)[0]
        }
        var types: [String] = []
        if let text = arguments.value("type") {
            types = text.split(separator: ",").map { $0.trimmingWhitespace().lowercased() }
            // A grant is a grant however it was made: `decision` events are those made at a prompt.
            if types.contains("grant") && !types.contains("decision") { types.append("decision") }
            let known = Set(EngineVocabulary.auditEventTypes)
            for type in types where !known.contains(type) {
                throw UsageError(message: "unknown event type '\(type)'"
                    + ArgumentParser.suggestion(type, among: known.sorted()) + "; types: "
                    + known.sorted().joined(separator: ", "), command: command)
            }
        }
        for option in ["user", "program", "device"] where arguments.value(option)?.isEmpty == true {
            throw UsageError(message: "'--\(option)' needs a value", command: command)
        }
        let archives = try arguments.allValues("archive-file").map { path throws(UsageError) in
            try AuditCommand.absolute(path, "archive-file")
        }
        if archives.count > AuditReportQuery.maxArchives {
            throw UsageError(message: "at most \(AuditReportQuery.maxArchives) '--archive-file' in one report",
                             command: command)
        }
        return AuditReportQuery(mode: .events, sinceMilliseconds: since, untilMilliseconds: until,
                                user: arguments.value("user"), program: arguments.value("program"),
                                permission: permission, device: arguments.value("device"), types: types,
                                archives: archives)
    }
}
