/// A JSON value as the strict parser reads it and the writer prints it.
///
/// Objects keep their members in the order written (replies print `version`, `id`
/// and `type` first) and never hold a key twice: the parser refuses duplicates.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number written without fraction or exponent that fits in 64 bits.
    case integer(Int64)
    /// Any other number (a fraction, an exponent, or an integer out of range).
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([JSONMember])

    /// The value's kind with an article, for error messages: "a string", "an array".
    public var kindDescription: String {
        switch self {
        case .null: return "null"
        case .bool(let value): return "the boolean \(value)"
        case .integer(let value): return "the integer \(value)"
        case .number(let value): return "the number \(value)"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

public struct JSONMember: Sendable, Hashable {
    public var key: String
    public var value: JSONValue

    public init(_ key: String, _ value: JSONValue) {
        self.key = key
        self.value = value
    }
}
