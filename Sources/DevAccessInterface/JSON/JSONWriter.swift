/// Prints `JSONValue`s compactly on one line: members in their order, no spaces,
/// non-ASCII text as UTF-8, control characters escaped. The output never holds a
/// raw newline, so it can be framed by one.
public enum JSONWriter {
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(value, into: &output)
        return output
    }

    public static func string(_ value: JSONValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    public static func write(_ value: JSONValue, into output: inout [UInt8]) {
        switch value {
        case .null:
            output.append(contentsOf: "null".utf8)
        case .bool(let flag):
            output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number):
            output.append(contentsOf: String(number).utf8)
        case .number(let number):
            // Only finite numbers are ever stored; NaN and infinities have no JSON form.
            output.append(contentsOf: (number.isFinite ? "\(number)" : "null").utf8)
        case .string(let text):
            writeString(text, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                write(element, into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            for (position, member) in members.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &output)
                output.append(UInt8(ascii: ":"))
                write(member.value, into: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// The same value for people: one member or element a line, indented by two spaces,
    /// `"key": value`; empty arrays and objects stay `[]` and `{}`. No trailing newline.
    public static func indented(_ value: JSONValue) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(1024)
        writeIndented(value, depth: 0, into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    private static func writeIndented(_ value: JSONValue, depth: Int, into output: inout [UInt8]) {
        func newline(_ depth: Int) {
            output.append(0x0a)
            output.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
        }
        switch value {
        case .array(let elements) where !elements.isEmpty:
            output.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                writeIndented(element, depth: depth + 1, into: &output)
            }
            newline(depth)
            output.append(UInt8(ascii: "]"))
        case .object(let members) where !members.isEmpty:
            output.append(UInt8(ascii: "{"))
            for (position, member) in members.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                writeString(member.key, into: &output)
                output.append(contentsOf: [UInt8(ascii: ":"), UInt8(ascii: " ")])
                writeIndented(member.value, depth: depth + 1, into: &output)
            }
            newline(depth)
            output.append(UInt8(ascii: "}"))
        default:
            write(value, into: &output)
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private static func writeString(_ text: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var text = text
        // Runs of bytes that need no escape are copied whole (most text has none at all).
        text.withUTF8 { bytes in
            var start = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == 0x7f else {
                    continue
                }
                if start < index { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
                start = index + 1
                switch byte {
                case UInt8(ascii: "\""): output.append(contentsOf: [0x5c, 0x22])
                case UInt8(ascii: "\\"): output.append(contentsOf: [0x5c, 0x5c])
                case 0x0a: output.append(contentsOf: [0x5c, UInt8(ascii: "n")])
                case 0x0d: output.append(contentsOf: [0x5c, UInt8(ascii: "r")])
                case 0x09: output.append(contentsOf: [0x5c, UInt8(ascii: "t")])
                default:
                    output.append(contentsOf: [0x5c, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                               hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xf)]])
                }
            }
            if start < bytes.count { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
        }
        output.append(UInt8(ascii: "\""))
    }
}
