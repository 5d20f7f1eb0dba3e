import DevAccessArguments
import DevAccessCore
import Glibc

/// Whether text output carries colour and symbols: on a terminal only (never in a pipe or
/// a file), unless NO_COLOR is set or TERM is "dumb"; `--color=always|never` overrides.
struct OutputStyle: Sendable, Equatable {
    var styled: Bool

    static let plain = OutputStyle(styled: false)

    static let colorOption = OptionSpec(long: "color", short: nil, value: "WHEN",
                                        help: "Colour and symbols: auto (on a terminal, unless NO_COLOR is set), "
                                            + "always, never.")

    /// `NO_COLOR` and `TERM` come from `arguments.environment`.
    static func resolve(_ arguments: ParsedArguments, command: String,
                        isTerminal: Bool = isatty(STDOUT_FILENO) == 1) throws(UsageError) -> OutputStyle {
        let environment = arguments.environment
        switch arguments.value("color") ?? "auto" {
        case "always": return OutputStyle(styled: true)
        case "never": return .plain
        case "auto":
            // https://no-color.org: set and not empty disables colour.
            let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
            return OutputStyle(styled: isTerminal && !noColor && environment["TERM"] != "dumb")
        case let other:
            throw UsageError(message: "'\(other)' is not a choice for '--color'; use auto, always or never",
                             command: command)
        }
    }
}

/// What a span of text means, and so its colour on a terminal.
enum Tone: Sendable {
    case good, caution, bad, faint

    var escape: String {
        switch self {
        case .good: return "\u{1B}[32m"
        case .caution: return "\u{1B}[33m"
        case .bad: return "\u{1B}[31m"
        case .faint: return "\u{1B}[2m"
        }
    }

    /// Green authorized, yellow limited and notDetermined, red denied and restricted.
    init?(_ status: AuthorizationStatus) {
        switch status {
        case .authorized: self = .good
        case .limited, .notDetermined: self = .caution
        case .denied, .restricted: self = .bad
        case .unavailable: self = .faint
        }
    }
}

/// Text with tones and symbols, rendered plain or styled. Every span is made safe for a
/// terminal here (TerminalText), so the only escape sequences that reach it are the
/// colours added after that; hardware names and reasons cannot bring their own.
struct StyledText: Sendable {
    private enum Span: Sendable {
        case text(String, Tone?)
        /// The end of a line: the only newline StyledText writes.
        case lineEnd
        /// Shown only when styled (a symbol in a pipe is noise), followed by a space.
        case symbol(String, Tone?)
    }

    private var spans: [Span] = []

    mutating func add(_ text: String, _ tone: Tone? = nil) {
        spans.append(.text(text, tone))
    }

    mutating func symbol(_ symbol: String, _ tone: Tone?) {
        spans.append(.symbol(symbol, tone))
    }

    /// A table cell: the text in its tone, the padding after it plain.
    mutating func cell(_ text: String, width: Int, _ tone: Tone?) {
        let padded = TableOutput.pad(text, width)
        let field = TerminalText.field(text)
        add(field, tone)
        add(String(padded.dropFirst(field.count)))
    }

    /// `text` on one line (a newline in it, from a reason or a device name, is shown
    /// escaped, never taken as the line's end), then the line's end.
    mutating func line(_ text: String, _ tone: Tone? = nil) {
        add(text, tone)
        spans.append(.lineEnd)
    }

    mutating func append(_ other: StyledText) {
        spans += other.spans
    }

    func rendered(_ style: OutputStyle) -> String {
        var text = ""
        for span in spans {
            switch span {
            case .text(let content, let tone):
                text += Self.paint(TerminalText.field(content), tone, style)
            case .lineEnd:
                text += "\n"
            case .symbol(let symbol, let tone):
                if style.styled { text += Self.paint(symbol, tone, style) + " " }
            }
        }
        return text
    }

    private static func paint(_ text: String, _ tone: Tone?, _ style: OutputStyle) -> String {
        guard style.styled, let tone, !text.isEmpty else { return text }
        // The colour ends before a line's end, so a pager or a cut line never carries it on.
        if text.hasSuffix("\n") { return tone.escape + text.dropLast() + "\u{1B}[0m\n" }
        return tone.escape + text + "\u{1B}[0m"
    }
}
