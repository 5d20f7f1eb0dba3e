import FoundationEssentials
import Glibc

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
        if let plain = decodePlain(text) { return plain }
        return try? JSONDecoder().decode([String: String].self, from: Data(text.utf8))
    }

    /// The common case without a decoder: what `encode` writes when no string needed an
    /// escape (no backslash anywhere). Anything else (escapes, spaces, a duplicate key, a
    /// control character) is left to JSONDecoder, so both paths accept exactly the same texts.
    /// Reports read a million of these; JSONDecoder costs several microseconds each.
    static func decodePlain(_ text: String) -> [String: String]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decodePlain(bytes: $0) }) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer { decodePlain(bytes: $0) }
    }

    static func decodePlain(bytes: UnsafeBufferPointer<UInt8>) -> [String: String]? {
        guard bytes.first == UInt8(ascii: "{"), bytes.last == UInt8(ascii: "}"),
              !bytes.contains(UInt8(ascii: "\\")) else { return nil }
        var result: [String: String] = [:]
        var index = 1
        let end = bytes.count - 1
        func string() -> String? {
            guard index < end, bytes[index] == UInt8(ascii: "\"") else { return nil }
            let start = index + 1
            var cursor = start
            while cursor < end, bytes[cursor] != UInt8(ascii: "\"") {
                if bytes[cursor] < 0x20 { return nil }
                cursor += 1
            }
            guard cursor < end else { return nil }
            index = cursor + 1
            return String(validating: UnsafeBufferPointer(rebasing: bytes[start..<cursor]), as: UTF8.self)
        }
        if index == end { return result }
        while true {
            guard let key = string(), index < end, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            guard let value = string(), result.updateValue(value, forKey: key) == nil else { return nil }
            if index == end { return result }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
        }
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
