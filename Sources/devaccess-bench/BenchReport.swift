// The one row type and the one printer of devaccess-bench: every section only adds rows
// here; the table (or, with --json, one JSON document) is printed once at the end.
import DevAccessProtocol
import Foundation
import Glibc
import Synchronization
import DevAccessInterface

/// A goal the project set for a figure (issue 17), and what it is checked on.
struct BenchGoal: Sendable {
    enum Measure: Sendable {
        /// The figure itself, in the row's unit.
        case value
        /// value / anchor value.
        case ratio
        /// value - anchor value, in the row's unit ("at most 10 ms over plain exec").
        case excess
    }

    var text: String
    var measure: Measure
    var limit: Double
    /// true: the measure must be at most `limit`; false: at least.
    var atMost: Bool

    static func below(_ limit: Double, _ text: String) -> BenchGoal { BenchGoal(text: text, measure: .value, limit: limit, atMost: true) }
    static func above(_ limit: Double, _ text: String) -> BenchGoal { BenchGoal(text: text, measure: .value, limit: limit, atMost: false) }
    static func ratioBelow(_ limit: Double, _ text: String) -> BenchGoal {
        BenchGoal(text: text, measure: .ratio, limit: limit, atMost: true)
    }
    static func excessBelow(_ limit: Double, _ text: String) -> BenchGoal {
        BenchGoal(text: text, measure: .excess, limit: limit, atMost: true)
    }
}

/// One figure: what, how much, against which anchor measured in the same run, and the
/// machine's load when it was taken. `skipped` instead of a value says why there is none.
struct BenchRow: Sendable {
    var section: String
    var name: String
    var value: Double?
    var unit: String
    var anchorName: String?
    var anchorValue: Double?
    var goal: BenchGoal?
    var note: String?
    var skipped: String?
    /// The 1-minute load average when the row was added.
    var load: Double?

    var ratio: Double? {
        guard let value, let anchorValue, anchorValue != 0 else { return nil }
        return value / anchorValue
    }

    var goalMet: Bool? {
        guard let goal, let value else { return nil }
        let measured: Double
        switch goal.measure {
        case .value: measured = value
        case .ratio:
            guard let ratio else { return nil }
            measured = ratio
        case .excess:
            guard let anchorValue else { return nil }
            measured = value - anchorValue
        }
        return goal.atMost ? measured <= goal.limit : measured >= goal.limit
    }
}

/// The rows of the run, in the order they were added.
final class BenchReport: Sendable {
    private struct State {
        var section = "-"
        var rows: [BenchRow] = []
        /// Scratch directories `fail` removes before it exits.
        var scratch: [String] = []
    }

    private let state = Mutex(State())
    let json: Bool
    let startLoad: String
    let started = Date()

    init(json: Bool) {
        self.json = json
        startLoad = Self.loadAverage()
    }

    /// Rows added from now on belong to `section`.
    func begin(_ section: String) {
        state.withLock { $0.section = section }
        FileHandle.standardError.write(Data("devaccess-bench: \(section) (load \(Self.loadAverage()))\n".utf8))
    }

    func add(_ name: String, _ value: Double, _ unit: String, anchor: String? = nil, _ anchorValue: Double? = nil,
             goal: BenchGoal? = nil, note: String? = nil) {
        let finite = value.isFinite ? value : nil
        let anchorFinite = anchorValue.flatMap { $0.isFinite ? $0 : nil }
        append(BenchRow(section: "", name: name, value: finite, unit: unit, anchorName: anchor, anchorValue: anchorFinite,
                        goal: goal, note: note, skipped: finite == nil ? "no finite value" : nil, load: nil))
    }

    /// A figure that was not measured, and why (a missing tool, not root, a release daemon).
    func skip(_ name: String, _ why: String, goal: BenchGoal? = nil) {
        append(BenchRow(section: "", name: name, value: nil, unit: "", anchorName: nil, anchorValue: nil, goal: goal,
                        note: nil, skipped: why, load: nil))
    }

    private func append(_ row: BenchRow) {
        var row = row
        row.load = Double(Self.loadAverage().split(separator: " ").first ?? "")
        state.withLock {
            row.section = $0.section
            $0.rows.append(row)
        }
    }

    var rows: [BenchRow] { state.withLock { $0.rows } }

    func removeOnFailure(_ path: String) { state.withLock { $0.scratch.append(path) } }

    var scratch: [String] { state.withLock { $0.scratch } }

    // MARK: - Printing

    static func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
            .joined(separator: " ") ?? "?"
    }

    static func kernel() -> String {
        var name = utsname()
        uname(&name)
        func text<T>(_ field: T) -> String {
            withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return text(name.sysname) + " " + text(name.release) + " " + text(name.machine)
    }

    /// Optimized or not, and whether DEBUG (the test hooks) is compiled in: a release build
    /// with -Xswiftc -DDEBUG is what the hotplug, operations and run sections need.
    static var build: String {
        var optimized = true
        // The closure runs only where assertions are checked: unoptimized builds.
        assert({
            optimized = false
            return true
        }())
        #if DEBUG
        return optimized ? "release (DEBUG: test hooks)" : "debug"
        #else
        return optimized ? "release" : "debug"
        #endif
    }

    /// Prints the table, or the JSON document, to stdout.
    func print() {
        if json {
            Swift.print(JSONWriter.string(document()))
        } else {
            Swift.print(table())
        }
    }

    static func number(_ value: Double) -> String {
        let magnitude = abs(value)
        if magnitude >= 10_000 { return String(format: "%.0f", value) }
        if magnitude >= 100 { return String(format: "%.1f", value) }
        if magnitude >= 1 { return String(format: "%.2f", value) }
        return String(format: "%.3f", value)
    }

    static func ratio(_ value: Double) -> String {
        let magnitude = abs(value)
        if magnitude >= 100 { return String(format: "%.0fx", value) }
        if magnitude >= 10 { return String(format: "%.1fx", value) }
        if magnitude >= 0.1 { return String(format: "%.2fx", value) }
        return String(format: "%.4fx", value)
    }

    func table() -> String {
        let rows = rows
        let header = ["section", "figure", "value", "anchor", "anchor value", "ratio", "goal", "load"]
        // A skipped row is its section, its name and why (and the goal it would be held to).
        let lines: [(cells: [String], skipped: Bool)] = rows.map { row in
            var goal = row.goal?.text ?? "-"
            if let met = row.goalMet { goal += met ? " (met)" : " (NOT met)" }
            guard let value = row.value else {
                return ([row.section, row.name, "skipped: " + (row.skipped ?? "?") + (row.goal == nil ? "" : "; goal " + goal)],
                        true)
            }
            return ([row.section, row.name, Self.number(value) + " " + row.unit, row.anchorName ?? "-",
                     row.anchorValue.map { Self.number($0) + " " + row.unit } ?? "-", row.ratio.map { Self.ratio($0) } ?? "-",
                     goal, row.load.map { String(format: "%.2f", $0) } ?? "?"], false)
        }
        // Column widths from the measured rows, capped: a longer cell pushes only its own line.
        let caps = [10, 64, 16, 56, 16, 8, 30, 5]
        var widths = header.map(\.count)
        for line in lines {
            for (index, cell) in line.cells.enumerated() where !line.skipped || index < 2 {
                widths[index] = min(caps[index], max(widths[index], cell.count))
            }
        }
        func render(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell.padding(toLength: max(widths[index], cell.count), withPad: " ",
                                                               startingAt: 0)
            }.joined(separator: "  ") + "\n"
        }
        var out = "devaccess-bench, \(Self.build) build; \(ProcessInfo.processInfo.activeProcessorCount) cores; "
            + "\(Self.kernel()); \(started.formatted(.iso8601)); load average at start \(startLoad), "
            + "at end \(Self.loadAverage())\n"
        out += "ratio = value / anchor value, both measured in this run; load = 1-minute load average at the row\n"
        out += render(header)
        out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
        for line in lines { out += render(line.cells) }
        let notes = rows.filter { $0.note != nil }
        if !notes.isEmpty {
            out += "notes:\n"
            for row in notes { out += "  \(row.section) / \(row.name): \(row.note ?? "")\n" }
        }
        return out
    }

    func document() -> JSONValue {
        func optional(_ value: Double?) -> JSONValue { value.map { .number($0) } ?? .null }
        func optional(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
        let loads = startLoad.split(separator: " ").compactMap { Double($0) }
        let rows: [JSONValue] = rows.map { row in
            var goal = JSONValue.null
            if let target = row.goal {
                let measure: String
                switch target.measure {
                case .value: measure = "value"
                case .ratio: measure = "ratio"
                case .excess: measure = "value_minus_anchor"
                }
                goal = .object([
                    JSONMember("text", .string(target.text)),
                    JSONMember("measure", .string(measure)),
                    JSONMember(target.atMost ? "at_most" : "at_least", .number(target.limit)),
                    JSONMember("met", row.goalMet.map { .bool($0) } ?? .null),
                ])
            }
            return .object([
                JSONMember("section", .string(row.section)),
                JSONMember("name", .string(row.name)),
                JSONMember("value", optional(row.value)),
                JSONMember("unit", .string(row.unit)),
                JSONMember("anchor", optional(row.anchorName)),
                JSONMember("anchor_value", optional(row.anchorValue)),
                JSONMember("ratio", optional(row.ratio)),
                JSONMember("goal", goal),
                JSONMember("skipped", optional(row.skipped)),
                JSONMember("note", optional(row.note)),
                JSONMember("load_1m", optional(row.load)),
            ])
        }
        return .object([
            JSONMember("machine", .object([
                JSONMember("cores", .integer(Int64(ProcessInfo.processInfo.activeProcessorCount))),
                JSONMember("kernel", .string(Self.kernel())),
                JSONMember("date", .string(started.formatted(.iso8601))),
                JSONMember("build", .string(Self.build)),
                JSONMember("load_average_start", .array(loads.map { .number($0) })),
                JSONMember("load_average_end",
                           .array(Self.loadAverage().split(separator: " ").compactMap { Double($0) }.map { .number($0) })),
            ])),
            JSONMember("rows", .array(rows)),
        ])
    }
}

/// The run's rows; every section adds to it.
let report = BenchReport(json: CommandLine.arguments.contains("--json"))

/// A section could not go on: the reason becomes its last row, the rows so far are printed,
/// and the program exits 1 (a half-measured section gives no figure rather than a wrong one).
func fail(_ message: String) -> Never {
    report.skip("failed", message)
    for path in report.scratch { Scratch.remove(path) }
    report.print()
    FileHandle.standardError.write(Data("devaccess-bench: \(message)\n".utf8))
    exit(1)
}
