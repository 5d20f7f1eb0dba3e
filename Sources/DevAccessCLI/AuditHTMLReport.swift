import DevAccessCore
import DevAccessSystem
import DevAccessInterface
import FoundationEssentials
import Glibc

/// Grants and runs (`devaccess run`, start to end) as bars; denials, refusals, revocations
/// and runs recorded without a run id as marks; per permission and per user (and program,
/// and device when the event names one), built as the report's pages arrive so a long
/// report needs memory for what is drawn, not for every event.
final class AuditTimeline {
    struct Bar {
        enum Kind {
            case grant
            case run
        }

        var kind: Kind = .grant
        /// The grant's id, or the run's.
        var grantID: String
        var permission: String
        var lane: String
        var start: Int64
        /// nil: still standing at the report's end.
        var end: Int64?
        var how: String
        var seq: Int64
    }

    struct Mark {
        /// `denied`, `refused`, `revoked`, `run`.
        var kind: String
        var permission: String
        var lane: String
        var time: Int64
        var seq: Int64
    }

    /// Beyond these, bars and marks are counted, not drawn (a picture of a million marks
    /// says no more than its summary table, and the page must open).
    /// The event types the timeline draws or uses to end a bar.
    static let types = ["decision", "grant", "revoke", "expiry", "reset", "refused", "run_start", "run_end"]

    static let maxBars = 5000
    static let maxMarks = 5000

    private var open: [String: Bar] = [:]
    /// Runs started and not ended yet, by run id: one bar per permission the run used.
    private var openRuns: [String: [Bar]] = [:]
    private(set) var bars: [Bar] = []
    private(set) var marks: [Mark] = []
    private(set) var notDrawn = 0
    private(set) var first: Int64?
    private(set) var last: Int64?

    static func lane(_ event: AuditEventDocument) -> String {
        var parts = [event.user.map { name in event.uid.map { "\(name) (\($0))" } ?? name }
            ?? event.actor.map { name in event.actorUid.map { "\(name) (\($0))" } ?? name } ?? "-"]
        if let program = event.program { parts.append(program) }
        if let device = event.device { parts.append(device) }
        return parts.joined(separator: " · ")
    }

    func add(_ event: AuditEventDocument) {
        first = min(first ?? event.timeUsec, event.timeUsec)
        last = max(last ?? event.timeUsec, event.timeUsec)
        let permission = event.permission ?? "-"
        switch event.type {
        case "decision", "grant":
            if event.decision == "deny" {
                mark("denied", event)
            } else if let id = event.details["grant_id"] {
                // Grant ids can repeat after a reset: a new allow closes the old bar.
                if let previous = open.removeValue(forKey: id) { keep(previous) }
                open[id] = Bar(grantID: id, permission: permission, lane: Self.lane(event), start: event.timeUsec,
                               end: event.details["expires_usec"].flatMap { Int64($0) }, how: event.how ?? "",
                               seq: event.seq)
            }
        case "revoke", "expiry":
            if event.type == "revoke" { mark("revoked", event) }
            if let id = event.details["grant_id"], var bar = open.removeValue(forKey: id) {
                bar.end = min(bar.end ?? event.timeUsec, event.timeUsec)
                keep(bar)
            }
        case "reset":
            for id in (event.details["grant_ids"] ?? "").split(separator: ",").map(String.init) {
                if var bar = open.removeValue(forKey: id) {
                    bar.end = min(bar.end ?? event.timeUsec, event.timeUsec)
                    keep(bar)
                }
            }
        case "refused": mark("refused", event)
        case "run_start":
            guard let id = event.details["run_id"] else {
                mark("run", event)
                return
            }
            if let previous = openRuns.removeValue(forKey: id) { previous.forEach(keep) }
            openRuns[id] = Self.runPermissions(event).map { permission in
                Bar(kind: .run, grantID: id, permission: permission, lane: Self.lane(event), start: event.timeUsec,
                    end: nil, how: "run", seq: event.seq)
            }
        case "run_end":
            guard let id = event.details["run_id"] else { return }
            if let started = openRuns.removeValue(forKey: id) {
                for var bar in started {
                    bar.end = max(bar.start, event.timeUsec)
                    keep(bar)
                }
            } else {
                // Started before the report's first event: its recorded duration says when.
                let ran = event.details["duration_usec"].flatMap { Int64($0) } ?? 0
                for permission in Self.runPermissions(event) {
                    keep(Bar(kind: .run, grantID: id, permission: permission, lane: Self.lane(event),
                             start: event.timeUsec - max(0, ran), end: event.timeUsec, how: "run", seq: event.seq))
                }
            }
        default: break
        }
    }

    /// The permissions a run used: its event's permission, or the list `devaccess run` records.
    static func runPermissions(_ event: AuditEventDocument) -> [String] {
        if let permission = event.permission { return [permission] }
        let listed = (event.details["permissions"] ?? "").split(separator: " ").map(String.init)
        return listed.isEmpty ? ["-"] : listed
    }

    /// The bars still open at the end of the report.
    func finish() {
        for bar in (Array(open.values) + openRuns.values.joined()).sorted(by: { $0.seq < $1.seq }) { keep(bar) }
        open = [:]
        openRuns = [:]
    }

    private func keep(_ bar: Bar) {
        if bars.count < Self.maxBars { bars.append(bar) } else { notDrawn += 1 }
    }

    private func mark(_ kind: String, _ event: AuditEventDocument) {
        guard marks.count < Self.maxMarks else {
            notDrawn += 1
            return
        }
        marks.append(Mark(kind: kind, permission: event.permission ?? "-", lane: Self.lane(event), time: event.timeUsec,
                          seq: event.seq))
    }
}

/// `--format html`: one self-contained page (no script, no network, no external file; a
/// Content-Security-Policy forbids loading anything) with the chain's state, the summary
/// tables and an SVG timeline per permission. Reads in a browser and prints.
enum AuditHTMLReport {
    static func page(ledger: String, chain: AuditVerifyDocument?, archives: [ArchiveVerifyDocument] = [],
                     summary: AuditSummary, timeline: AuditTimeline,
                     filters: String, from: Int64?, to: Int64, events: [[String]] = [], eventCount: Int64 = 0) -> String {
        var html = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
            <title>devaccess audit report</title>
            <style>
            body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#111}
            h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
            table{border-collapse:collapse;margin:.5em 0;font-size:12px}td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}
            td:first-child,th:first-child{text-align:left}
            .broken{background:#fdd;border:2px solid #b00;padding:.6em;font-weight:bold}
            .intact{color:#060}
            svg{display:block;margin:.5em 0;max-width:100%}
            .legend span{display:inline-block;margin-right:1.2em}
            .wide{overflow-x:auto;max-width:100%}
            .events td,.events th{text-align:left;white-space:nowrap}
            section{page-break-inside:avoid}
            @media print{body{margin:0}}
            </style></head><body>
            <h1>devaccess audit report</h1>
            <p>Ledger <code>\(escape(ledger))</code>. Generated \(escape(AuditTimeWords.local(microseconds: now()))) local \
            time (\(escape(AuditEventDocument.utc(microseconds: now())))). Filters: \(escape(filters)).</p>

            """
        if let chain {
            if chain.intact {
                html += "<p class=\"intact\">\(escape(chain.message))</p>\n"
            } else {
                html += "<p class=\"broken\">\(escape(ChainNotice.broken(chain)))</p>\n"
            }
        }
        for archive in archives {
            html += archive.intact ? "<p class=\"intact\">\(escape(archive.message)) (\(escape(archive.path)))</p>\n"
                : "<p class=\"broken\">\(escape(ChainNotice.broken(archive)))</p>\n"
        }
        html += "<section><h2>Summary</h2>\n" + summaryTables(summary) + "</section>\n"
        html += timelines(timeline, from: from ?? timeline.first ?? to, to: to)
        html += eventTable(events, count: eventCount)
        return html + "</body></html>\n"
    }

    static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1_000_000).rounded()) }

    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

    private static func summaryTables(_ summary: AuditSummary) -> String {
        let header = ["events", "requests", "consent", "password", "admin", "policy", "denied", "revoked", "expired",
                      "refused", "drift found", "drift repaired", "hotplug", "runs", "run time", "event numbers"]
        func row(_ name: String, _ counts: AuditCounts) -> String {
            let range = counts.firstEvent.map { first in "#\(first)…#\(counts.lastEvent ?? first)" } ?? "-"
            let cells = [counts.events, counts.requests, counts.grantsConsent, counts.grantsPassword, counts.grantsAdmin,
                         counts.grantsPolicy, counts.denials, counts.revocations, counts.expiries, counts.refusals,
                         counts.driftFound, counts.driftRepaired, counts.hotplug, counts.runs].map(String.init)
                         + [DurationText.format(seconds: counts.runSeconds), range]
            return "<tr><td>\(escape(name))</td>" + cells.map { "<td>\(escape($0))</td>" }.joined() + "</tr>\n"
        }
        func table(_ first: String, _ rows: [String]) -> String {
            "<div class=\"wide\"><table><tr><th>\(first)</th>" + header.map { "<th>\($0)</th>" }.joined() + "</tr>\n"
                + rows.joined() + "</table></div>\n"
        }
        var html = table("permission", summary.permissions.map { row($0.key, $0.counts) } + [row("(all)", summary.total)])
        html += table("user", summary.users.map { item in row(item.uid.map { "\(item.key) (\($0))" } ?? item.key, item.counts) })
        if !summary.programs.isEmpty {
            html += "<div class=\"wide\"><table><tr><th>program</th><th>events</th><th>event numbers</th></tr>\n"
            for program in summary.programs {
                html += "<tr><td>\(escape(program.program))</td><td>\(program.events)</td>"
                    + "<td>#\(program.firstEvent)…#\(program.lastEvent)</td></tr>\n"
            }
            html += "</table></div>\n"
        }
        return html
    }

    /// At most this many events are listed (the tables above count them all).
    static let eventLimit = 2000

    /// The events as `devaccess audit` lists them, one row each.
    private static func eventTable(_ rows: [[String]], count: Int64) -> String {
        var html = "<section><h2>Events</h2>\n"
        if rows.isEmpty { return html + "<p>no events</p></section>\n" }
        if count > rows.count {
            html += "<p>The first \(rows.count) of \(count) events; narrow the report with --since, --user or "
                + "--permission.</p>\n"
        }
        html += "<div class=\"wide\"><table class=\"events\"><tr>"
            + EventTable.header.map { "<th>\(escape($0))</th>" }.joined() + "</tr>\n"
        for row in rows { html += "<tr>" + row.map { "<td>\(escape($0))</td>" }.joined() + "</tr>\n" }
        return html + "</table></div></section>\n"
    }

    static let colors = ["consent": "#2a9d3a", "auth_self": "#1f8a8a", "admin": "#2b5cc8", "policy": "#777"]

    private static func timelines(_ timeline: AuditTimeline, from: Int64, to: Int64) -> String {
        let start = min(from, to), end = max(to, start + 1_000_000)
        let permissions = Set(timeline.bars.map(\.permission) + timeline.marks.map(\.permission)).sorted()
        var html = "<section><h2>Timeline</h2>\n" + legend()
        if timeline.notDrawn > 0 {
            html += "<p>\(timeline.notDrawn) more bars and marks are not drawn (the tables count them all); "
                + "narrow the report with --since, --user or --permission.</p>\n"
        }
        for permission in permissions {
            let geometry = TimelineGeometry(bars: timeline.bars.filter { $0.permission == permission },
                                            marks: timeline.marks.filter { $0.permission == permission },
                                            start: start, end: end)
            // Events of no permission (a refused request that named none) have "-".
            html += "<h3>\(escape(permission == "-" ? "no permission" : permission))</h3>\n<svg width=\"\(Int(TimelineGeometry.labelWidth + TimelineGeometry.plotWidth + 10))\" "
                + "height=\"\(Int(geometry.height))\" role=\"img\" aria-label=\"timeline of \(escape(permission))\" "
                + "data-permission=\"\(escape(permission))\">\n"
                + axis(geometry) + lanes(geometry)
                + geometry.bars.indices.map { bar(number: $0, geometry) }.joined()
                + geometry.marks.map { mark($0, geometry) }.joined()
                + "</svg>\n"
        }
        return html + "</section>\n"
    }

    /// What each colour and shape means.
    private static func legend() -> String {
        "<p class=\"legend\">"
            + colors.sorted { $0.key < $1.key }.map { key, color in
                "<span style=\"color:\(color)\">■ granted by \(EventTable.methodWords[key] ?? key)</span>"
            }.joined()
            + "<span style=\"color:#c00\">✕ denied</span><span style=\"color:#e07000\">▲ refused</span>"
            + "<span>| revoked</span><span style=\"color:#80c\">▬ run (devaccess run, start to end)</span>"
            + "<span style=\"color:#80c\">● run without a recorded id</span></p>\n"
    }

    /// Five ticks across the report's span, each a line and its local time.
    private static func axis(_ geometry: TimelineGeometry) -> String {
        var html = ""
        let (start, end) = (geometry.start, geometry.end)
        for tick in 0...4 {
            let time = start + (end - start) * Int64(tick) / 4
            let position = geometry.x(time)
            let anchor = tick == 0 ? "start" : tick == 4 ? "end" : "middle"
            html += "<line x1=\"\(f(position))\" y1=\"14\" x2=\"\(f(position))\" y2=\"\(f(geometry.height))\" stroke=\"#ddd\"/>"
                + "<text x=\"\(f(position))\" y=\"11\" font-size=\"10\" text-anchor=\"\(anchor)\">"
                + "\(escape(AuditTimeWords.local(microseconds: time)))</text>\n"
        }
        return html
    }

    /// Each lane's top line and its label.
    private static func lanes(_ geometry: TimelineGeometry) -> String {
        geometry.lanes.map { lane in
            let y = geometry.laneTop[lane] ?? TimelineGeometry.top
            return "<line x1=\"0\" y1=\"\(f(y))\" x2=\"\(f(TimelineGeometry.labelWidth + TimelineGeometry.plotWidth))\" "
                + "y2=\"\(f(y))\" stroke=\"#eee\"/>"
                + "<text x=\"0\" y=\"\(f(y + 13))\" font-size=\"11\">\(escape(String(lane.prefix(48))))</text>\n"
        }.joined()
    }

    /// A grant's bar, coloured by how it was given, or a run's, in its row of its lane.
    private static func bar(number: Int, _ geometry: TimelineGeometry) -> String {
        let bar = geometry.bars[number], rowHeight = TimelineGeometry.rowHeight
        let y = (geometry.laneTop[bar.lane] ?? TimelineGeometry.top) + 4 + rowHeight * Double(geometry.rows[number] ?? 0)
        let x0 = geometry.x(bar.start), x1 = max(geometry.x(bar.end ?? geometry.end), x0 + 2)
        if bar.kind == .run {
            return "<rect class=\"run\" data-run=\"\(escape(bar.grantID))\" data-seq=\"\(bar.seq)\" "
                + "data-lane=\"\(escape(bar.lane))\" data-start=\"\(bar.start)\" "
                + "data-end=\"\(bar.end.map(String.init) ?? "")\" x=\"\(f(x0))\" y=\"\(f(y + 2))\" "
                + "width=\"\(f(x1 - x0))\" height=\"\(f(rowHeight - 7))\" fill=\"#80c\"><title>run "
                + "\(escape(bar.grantID)), event #\(bar.seq)</title></rect>\n"
        }
        return "<rect class=\"grant\" data-grant=\"\(escape(bar.grantID))\" data-seq=\"\(bar.seq)\" "
            + "data-lane=\"\(escape(bar.lane))\" data-start=\"\(bar.start)\" data-end=\"\(bar.end.map(String.init) ?? "")\" "
            + "x=\"\(f(x0))\" y=\"\(f(y))\" width=\"\(f(x1 - x0))\" height=\"\(f(rowHeight - 3))\" "
            + "fill=\"\(colors[bar.how] ?? "#2b5cc8")\"><title>grant \(escape(bar.grantID)) (\(escape(EventTable.methodWords[bar.how] ?? bar.how))), "
            + "event #\(bar.seq)</title></rect>\n"
    }

    /// A denial, refusal, revocation or run without an id, at its time in the middle of its lane.
    private static func mark(_ mark: AuditTimeline.Mark, _ geometry: TimelineGeometry) -> String {
        let y = (geometry.laneTop[mark.lane] ?? TimelineGeometry.top)
            + (geometry.laneHeights[mark.lane] ?? TimelineGeometry.laneHeight) / 2
        let position = geometry.x(mark.time)
        let title = "<title>\(mark.kind), event #\(mark.seq)</title>"
        let data = "class=\"mark \(mark.kind)\" data-seq=\"\(mark.seq)\""
        switch mark.kind {
        case "denied":
            return "<text \(data) x=\"\(f(position - 4))\" y=\"\(f(y + 4))\" fill=\"#c00\" font-size=\"12\">✕\(title)</text>\n"
        case "refused":
            return "<text \(data) x=\"\(f(position - 4))\" y=\"\(f(y + 4))\" fill=\"#e07000\" font-size=\"11\">▲\(title)</text>\n"
        case "revoked":
            return "<line \(data) x1=\"\(f(position))\" y1=\"\(f(y - 8))\" x2=\"\(f(position))\" y2=\"\(f(y + 8))\" "
                + "stroke=\"#000\" stroke-width=\"2\">\(title)</line>\n"
        default:
            return "<circle \(data) cx=\"\(f(position))\" cy=\"\(f(y))\" r=\"4\" fill=\"#80c\">\(title)</circle>\n"
        }
    }

    private static func f(_ value: Double) -> String { DecimalText.fixed(value, digits: 1) }
}

/// One permission's timeline to scale: the report's span across the plot, a lane per
/// user (program, device) with its top and height, and each bar's row within its lane.
struct TimelineGeometry {
    static let labelWidth = 300.0, plotWidth = 700.0, laneHeight = 20.0, top = 24.0, rowHeight = 12.0
    let bars: [AuditTimeline.Bar]
    let marks: [AuditTimeline.Mark]
    let start: Int64
    let end: Int64
    let lanes: [String]
    /// Bar index -> row within its lane.
    let rows: [Int: Int]
    let laneTop: [String: Double]
    let laneHeights: [String: Double]
    let height: Double

    init(bars: [AuditTimeline.Bar], marks: [AuditTimeline.Mark], start: Int64, end: Int64) {
        self.bars = bars
        self.marks = marks
        self.start = start
        self.end = end
        lanes = Array(Set(bars.map(\.lane) + marks.map(\.lane))).sorted()
        let (rows, rowCounts) = Self.rows(bars, end: end)
        self.rows = rows
        var laneTop: [String: Double] = [:]
        var laneHeights: [String: Double] = [:]
        var y = Self.top
        for lane in lanes {
            laneTop[lane] = y
            laneHeights[lane] = max(Self.laneHeight, Self.rowHeight * Double(rowCounts[lane] ?? 1) + 8)
            y += laneHeights[lane] ?? Self.laneHeight
        }
        self.laneTop = laneTop
        self.laneHeights = laneHeights
        height = y + 8
    }

    /// Bars that overlap in time within a lane are stacked in rows of their own: each bar's
    /// row (by index), and the rows of each lane.
    static func rows(_ bars: [AuditTimeline.Bar], end: Int64) -> (row: [Int: Int], rows: [String: Int]) {
        var row: [Int: Int] = [:]
        var rows: [String: Int] = [:]
        var rowEnds: [String: [Int64]] = [:]
        for (number, bar) in bars.enumerated().sorted(by: { $0.element.start < $1.element.start }) {
            var ends = rowEnds[bar.lane] ?? []
            let free = ends.firstIndex { $0 <= bar.start } ?? ends.count
            if free == ends.count { ends.append(0) }
            ends[free] = bar.end ?? end
            row[number] = free
            rowEnds[bar.lane] = ends
            rows[bar.lane] = ends.count
        }
        return (row, rows)
    }

    /// Where `time` falls on the plot (clamped to the report's span).
    func x(_ time: Int64) -> Double {
        Self.labelWidth + Self.plotWidth * Double(min(max(time, start), end) - start) / Double(end - start)
    }
}
