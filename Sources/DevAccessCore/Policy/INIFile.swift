/// systemd-style INI text: `[Section]` headers, `Key=Value` lines, `#` and `;`
/// comments, a trailing `\` continues a line. The one INI reader of devaccess;
/// it keeps line numbers so errors can name the place.
public struct INIFile: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: String
        public var line: Int
    }

    public struct Section: Sendable, Equatable {
        public var name: String
        public var line: Int
        public var entries: [Entry]
    }

    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public var line: Int
        public var problem: String
        public var description: String { "line \(line): \(problem)" }
    }

    public var sections: [Section]

    public init(parsing text: String) throws(ParseError) {
        sections = []
        var pending = ""
        var pendingLine = 0
        var number = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            var line = String(raw)
            if line.hasSuffix("\r") { line.removeLast() }
            if pending.isEmpty { pendingLine = number }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let logical = (pending + line).trimmingWhitespace
            pending = ""
            try consume(logical, line: pendingLine)
        }
        if !pending.isEmpty { try consume(pending.trimmingWhitespace, line: pendingLine) }
    }

    private mutating func consume(_ line: String, line number: Int) throws(ParseError) {
        if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { return }
        if line.hasPrefix("[") {
            guard line.hasSuffix("]") else {
                throw ParseError(line: number, problem: "section header '\(line)' lacks its closing ']'")
            }
            let name = String(line.dropFirst().dropLast()).trimmingWhitespace
            guard !name.isEmpty else { throw ParseError(line: number, problem: "empty section name '[]'") }
            sections.append(Section(name: name, line: number, entries: []))
            return
        }
        guard let equals = line.firstIndex(of: "=") else {
            throw ParseError(line: number, problem: "expected '[Section]' or 'Key=Value', found '\(line)'")
        }
        let key = String(line[..<equals]).trimmingWhitespace
        let value = String(line[line.index(after: equals)...]).trimmingWhitespace
        guard !key.isEmpty else { throw ParseError(line: number, problem: "missing key before '=' in '\(line)'") }
        guard !sections.isEmpty else {
            throw ParseError(line: number, problem: "'\(key)=' appears before any [Section] header")
        }
        sections[sections.count - 1].entries.append(Entry(key: key, value: value, line: number))
    }
}

extension String {
    var trimmingWhitespace: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}
