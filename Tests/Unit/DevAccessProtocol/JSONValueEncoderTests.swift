import Foundation
import Testing
import DevAccessCore
import DevAccessInterface
@testable import DevAccessProtocol

/// `JSONValueEncoder` gives the tree the daemon got before from JSONEncoder (`.sortedKeys`)
/// and JSONParser, so `result` replies stay byte for byte what they were.
struct JSONValueEncoderTests {
    /// What the daemon did before: encode to bytes, parse them back.
    static func roundTrip(_ value: some Encodable) throws -> JSONValue {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try JSONParser.parse(encoder.encode(value))
    }

    struct Inner: Codable {
        var name: String
        var note: String?
        var flags: [Bool]
    }

    /// Keys whose byte order differs from a case-insensitive or numeric order, optionals
    /// absent and present, nested arrays and objects, dictionaries keyed by text and number.
    struct Shapes: Codable {
        var Zeta = 1
        var alpha = "a/b \"quoted\" \\ é ✓\n\t\u{7f}"
        var a10 = Int64.min
        var a2 = UInt64.max
        var absent: String?
        var present: Int32? = -7
        var small: Int8 = -128
        var inner = Inner(name: "x", note: nil, flags: [true, false])
        var inners = [Inner(name: "y", note: "n", flags: []), Inner(name: "z", note: nil, flags: [true])]
        var details = ["b": "2", "B": "1", "a": "0", "é": "3", "e": "4"]
        var byNumber = [10: "ten", 2: "two"]
        var matrix: [[Int]] = [[], [1, 2], [3]]
        var empty: [String: String] = [:]
        var reason = Reason(.summary, "alice cannot open any camera device")
        var when = Date(timeIntervalSinceReferenceDate: 12.5)
    }

    @Test func documentShapesMatchTheRoundTrip() throws {
        let shapes = Shapes()
        #expect(try JSONValueEncoder.encode(shapes) == Self.roundTrip(shapes))
        #expect(JSONWriter.bytes(try JSONValueEncoder.encode(shapes)) == JSONWriter.bytes(try Self.roundTrip(shapes)))
    }

    @Test(arguments: [0.0, -0.0, 1.0, -2.0, 0.1, 1e15, 1e16, 1e-7, 123_456.789, 52.520008, 13.404954,
                      9_007_199_254_740_992, .greatestFiniteMagnitude, .leastNonzeroMagnitude])
    func doublesMatchTheRoundTrip(_ number: Double) throws {
        #expect(try JSONValueEncoder.encode(["n": number]) == Self.roundTrip(["n": number]))
        #expect(try JSONValueEncoder.encode([number]) == Self.roundTrip([number]))
    }

    @Test(arguments: [Float(0.1), 1, 3.4028235e38, 1e-5])
    func floatsMatchTheRoundTrip(_ number: Float) throws {
        #expect(try JSONValueEncoder.encode(["n": number]) == Self.roundTrip(["n": number]))
    }

    /// A custom `encode(to:)` that asks for its keyed container twice, nests containers and
    /// writes through `superEncoder`: the same tree as JSONEncoder builds.
    struct Handwritten: Encodable {
        enum Keys: String, CodingKey { case outer, list, extra }
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: Keys.self)
            var outer = first.nestedContainer(keyedBy: Keys.self, forKey: .outer)
            try outer.encode("one", forKey: .extra)
            var list = first.nestedUnkeyedContainer(forKey: .list)
            try list.encode(1)
            try list.encodeNil()
            var nested = list.nestedContainer(keyedBy: Keys.self)
            try nested.encode(true, forKey: .extra)
            try "base".encode(to: first.superEncoder())
            var again = encoder.container(keyedBy: Keys.self)
            var outerAgain = again.nestedContainer(keyedBy: Keys.self, forKey: .outer)
            try outerAgain.encode(2.5, forKey: .list)
            try again.encodeNil(forKey: .extra)
        }
    }

    @Test func handwrittenContainersMatchTheRoundTrip() throws {
        #expect(try JSONValueEncoder.encode(Handwritten()) == Self.roundTrip(Handwritten()))
    }

    /// What the parser refused before is refused now, so the daemon still answers
    /// "cannot encode the result" instead of sending a line the client cannot read.
    @Test func refusesWhatTheRoundTripRefused() throws {
        #expect(throws: (any Error).self) { try Self.roundTrip(["n": Double.nan]) }
        #expect(throws: ProtocolError.self) { try JSONValueEncoder.encode(["n": Double.nan]) }
        #expect(throws: ProtocolError.self) { try JSONValueEncoder.encode([Float.infinity]) }

        #expect(throws: JSONParser.SyntaxError.self) { try Self.roundTrip(["text": "a\u{0}b"]) }
        let nul = #expect(throws: ProtocolError.self) { try JSONValueEncoder.encode(["text": "a\u{0}b"]) }
        #expect(nul?.context == "$.text" && nul?.code == .internal)

        var allowed = JSONValue.array([])
        for _ in 1..<JSONParser.maximumDepth { allowed = .array([allowed]) }
        let fits = Nested(depth: JSONParser.maximumDepth)
        #expect(try JSONValueEncoder.encode(fits) == Self.roundTrip(fits))
        #expect(try JSONValueEncoder.encode(fits) == allowed)
        let tooDeep = Nested(depth: JSONParser.maximumDepth + 1)
        #expect(throws: JSONParser.SyntaxError.self) { try Self.roundTrip(tooDeep) }
        #expect(throws: ProtocolError.self) { try JSONValueEncoder.encode(tooDeep) }
    }

    /// Arrays nested `depth` levels deep, the innermost empty.
    struct Nested: Encodable {
        var depth: Int
        func encode(to encoder: any Encoder) throws {
            var container = encoder.unkeyedContainer()
            if depth > 1 { try container.encode(Nested(depth: depth - 1)) }
        }
    }

    @Test func aValueThatEncodesNothingIsRefusedAtTheTopAndEmptyBelow() throws {
        struct Silent: Encodable { func encode(to encoder: any Encoder) throws {} }
        #expect(throws: (any Error).self) { try Self.roundTrip(Silent()) }
        #expect(throws: ProtocolError.self) { try JSONValueEncoder.encode(Silent()) }
        #expect(try JSONValueEncoder.encode(["s": Silent()]) == Self.roundTrip(["s": Silent()]))
        #expect(try JSONValueEncoder.encode(["s": Silent()]) == .object([JSONMember("s", .object([]))]))
    }
}
