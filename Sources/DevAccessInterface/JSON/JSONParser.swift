/// A strict RFC 8259 parser for one message.
///
/// Stricter than the RFC where a broker must be: duplicate keys, U+0000 in strings,
/// invalid UTF-8 and lone surrogates are refused, and nesting deeper than
/// `maximumDepth` is refused before it can exhaust the stack. Errors name the byte
/// offset and what was expected there.
public struct JSONParser {
    public static let maximumDepth = 32

    public struct SyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
        /// Zero-based byte offset into the message.
        public var offset: Int
        public var problem: String

        public var description: String { "byte \(offset): \(problem)" }
    }

    /// Parses `bytes` as exactly one JSON value, optionally surrounded by whitespace.
    public static func parse(_ bytes: some Collection<UInt8>) throws(SyntaxError) -> JSONValue {
        let contiguous = Array(bytes)
        return try contiguous.withUnsafeBufferPointer { (buffer) throws(SyntaxError) -> JSONValue in
            var parser = JSONParser(buffer)
            parser.skipWhitespace()
            guard parser.index < buffer.count else { throw parser.error("empty message: expected a JSON object") }
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            if parser.index < buffer.count {
                throw parser.error("unexpected \(parser.describeCurrent()) after the end of the JSON value")
            }
            return value
        }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    private func error(_ problem: String, at offset: Int? = nil) -> SyntaxError {
        SyntaxError(offset: offset ?? index, problem: problem)
    }

    private func describeCurrent() -> String {
        guard index < bytes.count else { return "end of message" }
        let byte = bytes[index]
        if byte >= 0x21 && byte < 0x7f { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x" + String(byte, radix: 16)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0a, 0x0d: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(SyntaxError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of message: expected a value") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected \(describeCurrent()): expected a value")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(SyntaxError) {
        let start = index
        let count = literal.utf8CodeUnitCount
        let matches = literal.withUTF8Buffer { expected in
            index + count <= bytes.count && (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
        }
        guard matches else { throw error("invalid literal: expected '\(literal)'", at: start) }
        index += count
    }

    private mutating func parseObject(depth: Int) throws(SyntaxError) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth) levels") }
        index += 1  // {
        var members: [JSONMember] = []
        var keys: Set<String> = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("unexpected \(describeCurrent()): expected a string key")
            }
            let keyStart = index
            let key = try parseString()
            guard keys.insert(key).inserted else { throw error("duplicate key '\(key)'", at: keyStart) }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw error("unexpected \(describeCurrent()): expected ':' after the key '\(key)'")
            }
            index += 1
            skipWhitespace()
            members.append(JSONMember(key, try parseValue(depth: depth)))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of message: expected ',' or '}'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            throw error("unexpected \(describeCurrent()): expected ',' or '}'")
        }
    }

    private mutating func parseArray(depth: Int) throws(SyntaxError) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth) levels") }
        index += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of message: expected ',' or ']'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            throw error("unexpected \(describeCurrent()): expected ',' or ']'")
        }
    }

    private mutating func parseString() throws(SyntaxError) -> String {
        let start = index
        index += 1  // opening quote
        var utf8: [UInt8] = []
        while true {
            guard index < bytes.count else { throw error("unterminated string", at: start) }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: utf8, as: UTF8.self) else {
                    throw error("string is not valid UTF-8", at: start)
                }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                try parseEscape(into: &utf8)
            case 0x00:
                throw error("U+0000 is not allowed in strings")
            case 0x01..<0x20:
                throw error("control character 0x\(String(byte, radix: 16)) must be escaped in a string")
            default:
                utf8.append(byte)
                index += 1
            }
        }
    }

    private mutating func parseEscape(into utf8: inout [UInt8]) throws(SyntaxError) {
        guard index < bytes.count else { throw error("unterminated escape sequence") }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): utf8.append(0x22)
        case UInt8(ascii: "\\"): utf8.append(0x5c)
        case UInt8(ascii: "/"): utf8.append(0x2f)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0c)
        case UInt8(ascii: "n"): utf8.append(0x0a)
        case UInt8(ascii: "r"): utf8.append(0x0d)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            let escapeStart = index - 2
            var scalarValue = try parseHex4()
            if (0xD800...0xDBFF).contains(scalarValue) {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw error("lone UTF-16 high surrogate in \\u escape", at: escapeStart)
                }
                index += 2
                let low = try parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw error("UTF-16 high surrogate not followed by a low surrogate", at: escapeStart)
                }
                scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalarValue) {
                throw error("lone UTF-16 low surrogate in \\u escape", at: escapeStart)
            }
            guard scalarValue != 0 else { throw error("U+0000 is not allowed in strings", at: escapeStart) }
            guard let scalar = Unicode.Scalar(scalarValue) else {
                throw error("\\u escape is not a Unicode scalar", at: escapeStart)
            }
            utf8.append(contentsOf: String(Character(scalar)).utf8)
        default:
            throw error("invalid escape '\\\(Character(Unicode.Scalar(byte)))'", at: index - 2)
        }
    }

    private mutating func parseHex4() throws(SyntaxError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("\\u escape needs four hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("\\u escape needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func parseNumber() throws(SyntaxError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number: expected a digit") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count && isDigit(bytes[index]) {
                throw error("invalid number: leading zeros are not allowed", at: start)
            }
        } else {
            while index < bytes.count && isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw error("invalid number: expected a digit after '.'")
            }
            while index < bytes.count && isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw error("invalid number: expected a digit in the exponent")
            }
            while index < bytes.count && isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else {
            throw error("number \(text) is out of range", at: start)
        }
        return .number(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
