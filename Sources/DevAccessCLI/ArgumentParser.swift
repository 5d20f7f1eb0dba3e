/// The one place devaccess parses its command line: long options (`--user NAME`,
/// `--user=NAME`), short aliases, flags, positionals and `--`. Small on purpose;
/// commands declare what they take and get typed errors that name the bad word.
struct OptionSpec: Sendable {
    var long: String
    var short: Character?
    /// Placeholder shown in help (`NAME`); nil for a flag.
    var value: String?
    var help: String
}

struct CommandSpec: Sendable {
    var name: String
    var abstract: String
    var usage: String
    var options: [OptionSpec]
    /// Extra help paragraphs (arguments, exit codes, examples).
    var discussion: String
    /// The first positional ends the options: what follows is another program's command
    /// line (`devaccess run --camera cheese -v`).
    var positionalEndsOptions = false

    static let helpOption = OptionSpec(long: "help", short: "h", value: nil, help: "Show this help and exit.")

    var allOptions: [OptionSpec] { options + [CommandSpec.helpOption] }

    var helpText: String {
        var text = "\(abstract)\n\nUsage: \(usage)\n\nOptions:\n"
        let rows = allOptions.map { option -> (String, String) in
            var left = option.short.map { "-\($0), " } ?? "    "
            left += "--\(option.long)"
            if let value = option.value { left += " \(value)" }
            return (left, option.help)
        }
        let width = (rows.map(\.0.count).max() ?? 0) + 2
        for (left, right) in rows {
            text += "  " + left + String(repeating: " ", count: width - left.count) + right + "\n"
        }
        if !discussion.isEmpty { text += "\n" + discussion + "\n" }
        return text
    }
}

struct ParsedArguments: Sendable, Equatable {
    var flags: Set<String> = []
    var values: [String: String] = [:]
    /// Every value given to each option, in order (`value` is the last one).
    var repeated: [String: [String]] = [:]
    var positionals: [String] = []

    func has(_ flag: String) -> Bool { flags.contains(flag) }
    func value(_ option: String) -> String? { values[option] }
    /// For an option that may be given more than once (`audit --archive-file`).
    func allValues(_ option: String) -> [String] { repeated[option] ?? [] }
}

/// A bad command line: the message names the word, `command` picks the help to point at.
struct UsageError: Error, Equatable {
    var message: String
    var command: String?
}

enum ArgumentParser {
    static func parse(_ arguments: [String], for spec: CommandSpec) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments()
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
    static func suggestion(_ word: String, among candidates: [String]) -> String {
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
