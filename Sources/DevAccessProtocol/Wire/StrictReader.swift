import DevAccessCore
import DevAccessInterface

// The decoding rules of the protocol, in one place. Every message, request or reply,
// is read through these functions, so every level of every message is held to them:
//
// 1. A message is one JSON object (JSONParser: no duplicate keys, valid UTF-8, no
//    U+0000, at most 32 levels deep).
// 2. Every object is read with an `ObjectReader`, and `finish()` refuses any key the
//    reader did not ask for: unknown fields are errors at every level.
// 3. Optional fields are left out when they have no value; `null` is never a value.
// 4. Types are exact: an integer field takes a JSON integer (no fraction, no exponent,
//    no string), a boolean takes `true`/`false`, a string takes a string.
// 5. Integers have ranges, strings have length limits, enumerations have their words;
//    a value outside is an error naming the field and the allowed values.
// 6. Errors are `ProtocolError`s whose context is the JSON path (`$.permissions[1]`).

/// Reads one JSON object field by field and refuses what was not read.
public struct ObjectReader {
    public let path: String
    private let members: [JSONMember]
    private var consumed: [Bool]

    public init(_ value: JSONValue, path: String) throws(ProtocolError) {
        guard case .object(let members) = value else {
            throw ProtocolError(.badMessage, context: path, reason: "expected an object, found \(value.kindDescription)")
        }
        self.path = path
        self.members = members
        consumed = Array(repeating: false, count: members.count)
    }

    public func childPath(_ key: String) -> String { path + "." + key }

    /// The value of `key`, marking it as known; nil when absent.
    public mutating func optional(_ key: String) -> JSONValue? {
        guard let position = members.firstIndex(where: { $0.key == key }) else { return nil }
        consumed[position] = true
        return members[position].value
    }

    public mutating func required(_ key: String) throws(ProtocolError) -> JSONValue {
        guard let value = optional(key) else {
            throw ProtocolError(.badMessage, context: path, reason: "missing field '\(key)'")
        }
        return value
    }

    /// Whether the object has `key`, without marking it known.
    public func has(_ key: String) -> Bool { members.contains { $0.key == key } }

    /// Refuses every key that was not read.
    public func finish() throws(ProtocolError) {
        if let position = consumed.firstIndex(of: false) {
            let unknown = members.indices.filter { !consumed[$0] }.map { "'\(members[$0].key)'" }
            throw ProtocolError(.badMessage, context: childPath(members[position].key),
                                reason: "unknown field" + (unknown.count > 1 ? "s " : " ") + unknown.joined(separator: ", "))
        }
    }

    // MARK: typed fields

    public mutating func string(_ key: String, maxLength: Int = 4096) throws(ProtocolError) -> String {
        try Strict.string(try required(key), path: childPath(key), maxLength: maxLength)
    }

    public mutating func optionalString(_ key: String, maxLength: Int = 4096) throws(ProtocolError) -> String? {
        guard let value = optional(key) else { return nil }
        return try Strict.string(value, path: childPath(key), maxLength: maxLength)
    }

    public mutating func integer(_ key: String, in range: ClosedRange<Int64>) throws(ProtocolError) -> Int64 {
        try Strict.integer(try required(key), path: childPath(key), in: range)
    }

    public mutating func optionalInteger(_ key: String, in range: ClosedRange<Int64>) throws(ProtocolError) -> Int64? {
        guard let value = optional(key) else { return nil }
        return try Strict.integer(value, path: childPath(key), in: range)
    }

    public mutating func uint32(_ key: String) throws(ProtocolError) -> UInt32 {
        UInt32(try integer(key, in: 0...Int64(UInt32.max)))
    }

    public mutating func int32(_ key: String) throws(ProtocolError) -> Int32 {
        Int32(try integer(key, in: Int64(Int32.min)...Int64(Int32.max)))
    }

    public mutating func bool(_ key: String) throws(ProtocolError) -> Bool {
        try Strict.bool(try required(key), path: childPath(key))
    }

    public mutating func array<T>(_ key: String, maxCount: Int = 1024,
                                  _ element: (JSONValue, String) throws(ProtocolError) -> T) throws(ProtocolError) -> [T] {
        try Strict.array(try required(key), path: childPath(key), maxCount: maxCount, element)
    }

    public mutating func optionalArray<T>(_ key: String, maxCount: Int = 1024,
                                          _ element: (JSONValue, String) throws(ProtocolError) -> T) throws(ProtocolError) -> [T]? {
        guard let value = optional(key) else { return nil }
        return try Strict.array(value, path: childPath(key), maxCount: maxCount, element)
    }

    /// A word from a fixed set, e.g. a status or a scope.
    public mutating func word<T>(_ key: String, _ words: [(String, T)]) throws(ProtocolError) -> T {
        try Strict.word(try required(key), path: childPath(key), words)
    }

    /// An object of string values (`details`).
    public mutating func stringMap(_ key: String, maxCount: Int = 256) throws(ProtocolError) -> [String: String] {
        let value = try required(key)
        let path = childPath(key)
        guard case .object(let members) = value else {
            throw ProtocolError(.badMessage, context: path, reason: "expected an object of strings, found \(value.kindDescription)")
        }
        guard members.count <= maxCount else {
            throw ProtocolError(.badMessage, context: path, reason: "more than \(maxCount) entries")
        }
        var result: [String: String] = [:]
        for member in members {
            result[member.key] = try Strict.string(member.value, path: path + "." + member.key, maxLength: 4096)
        }
        return result
    }

    public mutating func object<T>(_ key: String, _ read: (inout ObjectReader) throws(ProtocolError) -> T) throws(ProtocolError) -> T {
        var reader = try ObjectReader(try required(key), path: childPath(key))
        let result = try read(&reader)
        try reader.finish()
        return result
    }

    public mutating func optionalObject<T>(_ key: String,
                                           _ read: (inout ObjectReader) throws(ProtocolError) -> T) throws(ProtocolError) -> T? {
        guard let value = optional(key) else { return nil }
        var reader = try ObjectReader(value, path: childPath(key))
        let result = try read(&reader)
        try reader.finish()
        return result
    }
}

/// Type checks for single values; `ObjectReader` uses them for fields, arrays for elements.
public enum Strict {
    public static func string(_ value: JSONValue, path: String, maxLength: Int = 4096) throws(ProtocolError) -> String {
        guard case .string(let text) = value else {
            throw ProtocolError(.badMessage, context: path, reason: "expected a string, found \(value.kindDescription)")
        }
        guard text.utf8.count <= maxLength else {
            throw ProtocolError(.badMessage, context: path, reason: "string longer than \(maxLength) bytes")
        }
        return text
    }

    public static func integer(_ value: JSONValue, path: String, in range: ClosedRange<Int64>) throws(ProtocolError) -> Int64 {
        guard case .integer(let number) = value else {
            throw ProtocolError(.badMessage, context: path,
                                reason: "expected an integer in \(range.lowerBound)...\(range.upperBound), found \(value.kindDescription)")
        }
        guard range.contains(number) else {
            throw ProtocolError(.badMessage, context: path,
                                reason: "\(number) is out of range \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    public static func uint32(_ value: JSONValue, path: String) throws(ProtocolError) -> UInt32 {
        UInt32(try integer(value, path: path, in: 0...Int64(UInt32.max)))
    }

    public static func bool(_ value: JSONValue, path: String) throws(ProtocolError) -> Bool {
        guard case .bool(let flag) = value else {
            throw ProtocolError(.badMessage, context: path, reason: "expected true or false, found \(value.kindDescription)")
        }
        return flag
    }

    public static func array<T>(_ value: JSONValue, path: String, maxCount: Int,
                                _ element: (JSONValue, String) throws(ProtocolError) -> T) throws(ProtocolError) -> [T] {
        guard case .array(let elements) = value else {
            throw ProtocolError(.badMessage, context: path, reason: "expected an array, found \(value.kindDescription)")
        }
        guard elements.count <= maxCount else {
            throw ProtocolError(.badMessage, context: path, reason: "more than \(maxCount) elements")
        }
        var result: [T] = []
        result.reserveCapacity(elements.count)
        for (position, item) in elements.enumerated() {
            result.append(try element(item, "\(path)[\(position)]"))
        }
        return result
    }

    public static func word<T>(_ value: JSONValue, path: String, _ words: [(String, T)]) throws(ProtocolError) -> T {
        let text = try string(value, path: path, maxLength: 64)
        guard let match = words.first(where: { $0.0 == text }) else {
            throw ProtocolError(.badMessage, context: path,
                                reason: "'\(text)' is not one of: " + words.map(\.0).joined(separator: ", "))
        }
        return match.1
    }

    public static func object<T>(_ value: JSONValue, path: String,
                                 _ read: (inout ObjectReader) throws(ProtocolError) -> T) throws(ProtocolError) -> T {
        var reader = try ObjectReader(value, path: path)
        let result = try read(&reader)
        try reader.finish()
        return result
    }

    /// An access mode in `rwx` form: three characters, each the letter or '-'.
    public static func accessMode(_ value: JSONValue, path: String) throws(ProtocolError) -> AccessMode {
        let text = try string(value, path: path, maxLength: 3)
        let characters = Array(text)
        guard characters.count == 3,
              characters[0] == "r" || characters[0] == "-",
              characters[1] == "w" || characters[1] == "-",
              characters[2] == "x" || characters[2] == "-" else {
            throw ProtocolError(.badMessage, context: path, reason: "'\(text)' is not an access mode like 'rw-'")
        }
        var mode: AccessMode = .none
        if characters[0] == "r" { mode.insert(.read) }
        if characters[1] == "w" { mode.insert(.write) }
        if characters[2] == "x" { mode.insert(.execute) }
        return mode
    }

    /// A permission name. Names this build does not know get `unknown-permission`,
    /// which does not close the connection: the message itself was well formed.
    public static func permission(_ value: JSONValue, path: String) throws(ProtocolError) -> Permission {
        let text = try string(value, path: path, maxLength: 64)
        guard let permission = Permission.all.first(where: { $0.rawValue == text }) else {
            throw ProtocolError(.unknownPermission, context: path,
                                reason: "unknown permission '\(text)'; this broker knows: "
                                    + Permission.all.map(\.rawValue).joined(separator: ", "))
        }
        return permission
    }

    /// A non-empty list of distinct permissions.
    public static func permissions(_ value: JSONValue, path: String) throws(ProtocolError) -> [Permission] {
        let list = try array(value, path: path, maxCount: 64, permission)
        guard !list.isEmpty else {
            throw ProtocolError(.badMessage, context: path, reason: "the list is empty; leave the field out to mean all")
        }
        var seen: Set<Permission> = []
        for (position, permission) in list.enumerated() where !seen.insert(permission).inserted {
            throw ProtocolError(.badMessage, context: "\(path)[\(position)]", reason: "'\(permission)' is listed twice")
        }
        return list
    }
}
