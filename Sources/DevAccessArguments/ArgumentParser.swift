import DevAccessCore

/// The one place devaccess and devaccessd parse their command lines: long options
/// (`--user NAME`, `--user=NAME`), short aliases, flags, positionals and `--`. Small on
/// purpose; a command declares what it takes (`CommandSpec`) and gets typed errors that
/// name the bad word.
public struct OptionSpec: Sendable {
    public var long: String
    public var short: Character?
    /// Placeholder shown in help (`NAME`); nil for a flag.
    public var value: String?
    public var help: String
    /// Nothing after this option is read (`--help`, `--version`): it answers on its own,
    /// whatever else the line holds.
    public var endsParsing: Bool

    public init(long: String, short: Character?, value: String?, help: String, endsParsing: Bool = false) {
        self.long = long
        self.short = short
        self.value = value
        self.help = help
        self.endsParsing = endsParsing
    }
}

public struct CommandSpec: Sendable {
    public var name: String
    public var abstract: String
    public var usage: String
    public var options: [OptionSpec]
    /// Extra help paragraphs (arguments, exit codes, examples).
    public var discussion: String
    /// The first positional ends the options: what follows is another program's command
    /// line (`devaccess run --camera cheese -v`).
    public var positionalEndsOptions: Bool

    public init(name: String, abstract: String, usage: String, options: [OptionSpec], discussion: String,
                positionalEndsOptions: Bool = false) {
        self.name = name
        self.abstract = abstract
        self.usage = usage
        self.options = options
        self.discussion = discussion
        self.positionalEndsOptions = positionalEndsOptions
    }

    public static let helpOption = OptionSpec(long: "help", short: "h", value: nil, help: "Show this help and exit.",
                                              endsParsing: true)

    public var allOptions: [OptionSpec] { options + [CommandSpec.helpOption] }

    /// Help lines are wrapped to fit 80 columns; an option too long for the left column
    /// gets its help on the lines below it.
    static let helpWidth = 79
    static let leftColumnLimit = 26

    public var helpText: String {
        var text = "\(abstract)\n\nUsage: \(usage)\n\nOptions:\n"
        let rows = allOptions.map { option -> (String, String) in
            var left = option.short.map { "-\($0), " } ?? "    "
            left += "--\(option.long)"
            if let value = option.value { left += " \(value)" }
            return (left, option.help)
        }
        let width = min(rows.map(\.0.count).max() ?? 0, Self.leftColumnLimit) + 2
        let indent = String(repeating: " ", count: 2 + width)
        for (left, right) in rows {
            let lines = Self.wrap(right, width: Self.helpWidth - indent.count)
            if left.count + 2 > width {
                text += "  " + left + "\n"
                for line in lines { text += indent + line + "\n" }
                continue
            }
            text += "  " + left + String(repeating: " ", count: width - left.count) + (lines.first ?? "") + "\n"
            for line in lines.dropFirst() { text += indent + line + "\n" }
        }
        if !discussion.isEmpty { text += "\n" + discussion + "\n" }
        return text
    }

    /// Words of `text` in lines of at most `width` characters (a longer word stands alone).
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }
}

public struct ParsedArguments: Sendable, Equatable {
    public var flags: Set<String> = []
    public var values: [String: String] = [:]
    /// Every value given to each option, in order (`value` is the last one).
    public var repeated: [String: [String]] = [:]
    public var positionals: [String] = []
    /// The environment the program started with, read once by its `main` and set by the
    /// caller of the parser (the parser never reads it): where an option is not given, a
    /// variable may give its default (`--state-dir`, `DEVACCESS_STATE_DIR`).
    public var environment = ProcessEnvironment()

    public init() {}

    public func has(_ flag: String) -> Bool { flags.contains(flag) }
    public func value(_ option: String) -> String? { values[option] }
    /// For an option that may be given more than once (`audit --archive-file`).
    public func allValues(_ option: String) -> [String] { repeated[option] ?? [] }

    /// The value of `--option` as a whole number in `range`; nil when not given.
    public func integer(_ option: String, in range: ClosedRange<Int>, command: String? = nil)
        throws(UsageError) -> Int?
    {
        guard let text = value(option) else { return nil }
        guard let number = Int(text), range.contains(number) else {
            throw UsageError(message: "'\(text)' is not a number in \(range.lowerBound)...\(range.upperBound) "
                + "for '--\(option)'", command: command)
        }
        return number
    }
}

/// A bad command line: the message names the word, `command` picks the help to point at.
public struct UsageError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public var command: String?

    public init(message: String, command: String? = nil) {
        self.message = message
        self.command = command
    }

    public var description: String { message }
}

public enum ArgumentParser {
    /// `environment`: what the program's `main` read, kept in the result for the defaults
    /// that variables give.
    public static func parse(_ arguments: [String], for spec: CommandSpec,
                             environment: ProcessEnvironment = ProcessEnvironment()) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments()
        parsed.environment = environment
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let word = arguments[index]
            index += 1
            if optionsEnded || word == "-" || !word.hasPrefix("-") {
                parsed.positionals.append(word)
                if spec.positionalEndsOptions { optionsEnded = true }
                continue
            }
            if word == "--" {
                optionsEnded = true
                continue
            }
            let (option, inlineValue) = try lookup(word, in: spec)
            if option.value == nil {
                if inlineValue != nil {
                    throw UsageError(message: "option '--\(option.long)' takes no value", command: spec.name)
                }
                parsed.flags.insert(option.long)
                if option.endsParsing { return parsed }
                continue
            }
            if let inlineValue {
                parsed.values[option.long] = inlineValue
                parsed.repeated[option.long, default: []].append(inlineValue)
            } else if index < arguments.count {
                parsed.values[option.long] = arguments[index]
                parsed.repeated[option.long, default: []].append(arguments[index])
                index += 1
            } else {
                throw UsageError(message: "missing value for '--\(option.long) \(option.value ?? "")'",
                                 command: spec.name)
            }
        }
        return parsed
    }

    private static func lookup(_ word: String, in spec: CommandSpec) throws(UsageError) -> (OptionSpec, String?) {
        if word.hasPrefix("--") {
            let body = word.dropFirst(2)
            let name: Substring
            var value: String?
            if let equals = body.firstIndex(of: "=") {
                name = body[..<equals]
                value = String(body[body.index(after: equals)...])
            } else {
                name = body
            }
            if let option = spec.allOptions.first(where: { $0.long == name }) { return (option, value) }
            let names = spec.allOptions.map { "--" + $0.long }
            throw UsageError(message: "unknown option '--\(name)'" + suggestion("--" + name, among: names),
                             command: spec.name)
        }
        // Short options: one letter each; "-uNAME" is not supported, "-u NAME" is.
        let letters = word.dropFirst()
        if letters.count == 1, let letter = letters.first,
           let option = spec.allOptions.first(where: { $0.short == letter }) {
            return (option, nil)
        }
        throw UsageError(message: "unknown option '\(word)'", command: spec.name)
    }

    /// " (did you mean 'x'?)" when one candidate is within two edits, else "".
    public static func suggestion(_ word: String, among candidates: [String]) -> String {
        let scored = candidates.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= 2 }
        guard let best = scored.min(by: { $0.1 < $1.1 }) else { return "" }
        return " (did you mean '\(best.0)'?)"
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
