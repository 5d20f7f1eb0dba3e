import Foundation

/// The `details` column: a flat JSON object with keys in sorted order, written by hand
/// so the stored text depends on nothing but the input (Foundation's encoder output
/// may change between releases, and this runs 100,000s of times in a batch).
enum DetailsJSON {
    static func encode(_ details: [String: String]) -> String {
        var out = "{"
        for (index, pair) in details.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
            if index > 0 { out += "," }
            appendQuoted(pair.key, to: &out)
            out += ":"
            appendQuoted(pair.value, to: &out)
        }
        return out + "}"
    }

    /// Reads a stored object back; nil when the text is not a flat object of strings.
    static func decode(_ text: String) -> [String: String]? {
        try? JSONDecoder().decode([String: String].self, from: Data(text.utf8))
    }

    private static func appendQuoted(_ string: String, to out: inout String) {
        out += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
