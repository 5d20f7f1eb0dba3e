/// Text from outside the process (a device's name from its firmware, a requester's reason,
/// a program's path, a user name) made safe to show on a terminal. C0 and C1 control
/// characters, DEL and the bidirectional and line-separator controls are shown as `\xNN`,
/// never sent: no escape sequence reaches the terminal (it could redraw the screen and fake
/// a question or a row), and no text reorders the line it is shown in. JSON output needs
/// none of this (the encoder escapes them).
public enum TerminalText {
    /// For one line or one cell (a table row's field, one line of a question): newlines and
    /// tabs are shown as `\n` and `\t` too, so the text cannot add rows or columns.
    public static func field(_ text: String) -> String {
        shown(text, keepingLayout: false)
    }

    /// For text of several lines (messages, reports): newlines and tabs stay.
    public static func block(_ text: String) -> String {
        shown(text, keepingLayout: true)
    }

    private static func shown(_ text: String, keepingLayout: Bool) -> String {
        // Most text is printable ASCII: checked on the bytes, returned as is.
        let plain = text.utf8.allSatisfy { byte in
            (byte >= 0x20 && byte < 0x7F) || (keepingLayout && (byte == 0x0A || byte == 0x09))
        }
        if plain { return text }
        guard text.unicodeScalars.contains(where: { isHidden($0, keepingLayout: keepingLayout) }) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard isHidden(scalar, keepingLayout: keepingLayout) else {
                result.append(scalar)
                continue
            }
            switch scalar {
            case "\n": result.append(contentsOf: "\\n".unicodeScalars)
            case "\t": result.append(contentsOf: "\\t".unicodeScalars)
            case "\r": result.append(contentsOf: "\\r".unicodeScalars)
            default:
                let hex = String(scalar.value, radix: 16, uppercase: true)
                let digits = hex.count % 2 == 1 ? "0" + hex : hex
                result.append(contentsOf: ("\\x" + digits).unicodeScalars)
            }
        }
        return String(result)
    }

    private static func isHidden(_ scalar: Unicode.Scalar, keepingLayout: Bool) -> Bool {
        let value = scalar.value
        if keepingLayout && (scalar == "\n" || scalar == "\t") { return false }
        return value < 0x20 || (0x7F...0x9F).contains(value)
            || (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value)
            || value == 0x200E || value == 0x200F || value == 0x061C || value == 0x2028 || value == 0x2029
    }
}
