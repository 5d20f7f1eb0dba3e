import DevAccessInterface

/// Encodes a `Codable` value straight into the `JSONValue` that `JSONEncoder` (`.sortedKeys`,
/// default strategies) and then `JSONParser` would give, without the bytes in between: a
/// result document is encoded once on its way to the wire.
///
/// The same tree, member for member: keys sorted by their UTF-8 bytes (`JSONEncoder`'s
/// order on Linux); a floating-point number `JSONEncoder` prints without fraction (`2.0`
/// prints `2`) is an `.integer`, an integer beyond `Int64` a `.number`; a value that encodes
/// nothing is `{}`. What the round trip refused is refused: NaN and infinities, U+0000 in a
/// string, nesting deeper than `JSONParser.maximumDepth`. `JSONEncoder`'s Foundation special
/// cases (`Data` as base64, `URL` as a string) are not made: no wire document holds either.
/// A value that cannot be encoded is an `internal` error whose context is where, as `$.key[index]`.
public enum JSONValueEncoder {
    public static func encode(_ value: some Encodable) throws(ProtocolError) -> JSONValue {
        let root = Node()
        do {
            try NodeEncoder(node: root, codingPath: []).encodeValue(value)
        } catch let error as ProtocolError {
            throw error
        } catch {
            throw ProtocolError(.internal, context: "$", reason: "\(error)")
        }
        guard root.kind != .empty else {
            throw ProtocolError(.internal, context: "$", reason: "\(type(of: value)) encoded nothing")
        }
        return try root.value(depth: 0, path: "$")
    }
}

/// A value being built: objects and arrays are shared by the containers that fill them
/// (a keyed container asked for twice writes into the same object), so a class until done.
private final class Node {
    enum Kind { case empty, scalar, object, array }
    private(set) var kind = Kind.empty
    private var scalar = JSONValue.null
    private var members: [String: Node] = [:]
    private var elements: [Node] = []

    var count: Int { elements.count }

    func set(_ value: JSONValue) {
        (kind, scalar) = (.scalar, value)
    }

    func becomeObject() {
        if kind != .object { (kind, members) = (.object, [:]) }
    }

    func becomeArray() {
        if kind != .array { (kind, elements) = (.array, []) }
    }

    /// The member `key`, the one already there when a container is asked for it again.
    func member(_ key: String, reusing: Bool) -> Node {
        if reusing, let existing = members[key] { return existing }
        let node = Node()
        members[key] = node
        return node
    }

    func appended() -> Node {
        let node = Node()
        elements.append(node)
        return node
    }

    func value(depth: Int, path: String) throws(ProtocolError) -> JSONValue {
        switch kind {
        case .scalar:
            return scalar
        case .empty, .object:
            guard depth < JSONParser.maximumDepth else { throw Self.tooDeep(path) }
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            var result: [JSONMember] = []
            result.reserveCapacity(sorted.count)
            for (key, node) in sorted {
                result.append(JSONMember(key, try node.value(depth: depth + 1, path: path + "." + key)))
            }
            return .object(result)
        case .array:
            guard depth < JSONParser.maximumDepth else { throw Self.tooDeep(path) }
            var result: [JSONValue] = []
            result.reserveCapacity(elements.count)
            for (index, node) in elements.enumerated() {
                result.append(try node.value(depth: depth + 1, path: path + "[\(index)]"))
            }
            return .array(result)
        }
    }

    private static func tooDeep(_ path: String) -> ProtocolError {
        ProtocolError(.internal, context: path, reason: "nested deeper than \(JSONParser.maximumDepth) levels")
    }
}

/// Scalars as `JSONParser` reads what `JSONEncoder` prints for them.
private enum Scalar {
    /// The value's JSON scalar, or nil when it is not one (it encodes itself).
    static func of<T: Encodable>(_ value: T, path: [any CodingKey]) throws -> JSONValue? {
        switch value {
        case let text as String: return try string(text, path: path)
        case let flag as Bool: return .bool(flag)
        case let number as Double: return try floating(number, path: path)
        case let number as Float: return try floating(number, path: path)
        case let number as any BinaryInteger: return integer(number)
        default: return nil
        }
    }

    static func string(_ text: String, path: [any CodingKey]) throws -> JSONValue {
        guard !text.utf8.contains(0) else { throw unencodable(path, "U+0000 is not allowed in strings") }
        return .string(text)
    }

    static func integer(_ number: some BinaryInteger) -> JSONValue {
        Int64(exactly: number).map(JSONValue.integer) ?? .number(Double(number))
    }

    /// `JSONEncoder` prints `description` without a trailing ".0"; the parser reads a
    /// number without fraction or exponent that fits in 64 bits as an integer.
    static func floating<T: BinaryFloatingPoint & LosslessStringConvertible>(
        _ number: T, path: [any CodingKey]
    ) throws -> JSONValue {
        guard number.isFinite else { throw unencodable(path, "\(number) has no JSON form") }
        var text = number.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        if !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let whole = Int64(text) {
            return .integer(whole)
        }
        guard let parsed = Double(text) else { throw unencodable(path, "\(text) is not a number") }
        return .number(parsed)
    }

    static func unencodable(_ path: [any CodingKey], _ reason: String) -> ProtocolError {
        let text = path.map { key in key.intValue.map { "[\($0)]" } ?? "." + key.stringValue }.joined()
        return ProtocolError(.internal, context: "$" + text, reason: reason)
    }
}

private struct NodeEncoder: Encoder {
    let node: Node
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// A scalar into this node, or the value encoding itself into it.
    func encodeValue<T: Encodable>(_ value: T) throws {
        if let scalar = try Scalar.of(value, path: codingPath) {
            node.set(scalar)
        } else {
            try value.encode(to: self)
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.becomeObject()
        return KeyedEncodingContainer(KeyedNodeContainer<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.becomeArray()
        return UnkeyedNodeContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleNodeContainer(encoder: self)
    }
}

private struct KeyedNodeContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let codingPath: [any CodingKey]

    private func encoder(_ key: any CodingKey, reusing: Bool = false) -> NodeEncoder {
        NodeEncoder(node: node.member(key.stringValue, reusing: reusing), codingPath: codingPath + [key])
    }

    mutating func encodeNil(forKey key: Key) throws {
        encoder(key).node.set(.null)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try encoder(key).encodeValue(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type,
                                                        forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        encoder(key, reusing: true).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder(key, reusing: true).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        encoder(SuperKey())
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        encoder(key)
    }
}

private struct UnkeyedNodeContainer: UnkeyedEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]
    var count: Int { node.count }

    private func encoder() -> NodeEncoder {
        let index = IndexKey(intValue: node.count)
        return NodeEncoder(node: node.appended(), codingPath: codingPath + [index])
    }

    mutating func encodeNil() throws {
        encoder().node.set(.null)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try encoder().encodeValue(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        encoder().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        encoder().unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        encoder()
    }
}

private struct SingleNodeContainer: SingleValueEncodingContainer {
    let encoder: NodeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    mutating func encodeNil() throws {
        encoder.node.set(.null)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try encoder.encodeValue(value)
    }
}

private struct SuperKey: CodingKey {
    var stringValue: String { "super" }
    var intValue: Int? { nil }
    init() {}
    init?(stringValue: String) { nil }
    init?(intValue: Int) { nil }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}
