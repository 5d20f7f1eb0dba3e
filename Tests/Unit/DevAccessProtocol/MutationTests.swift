import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// A deterministic mutation fuzzer over valid messages: whatever the bytes, the
/// decoders answer with a value or a `ProtocolError`, never a crash, and anything
/// accepted re-encodes to a message that decodes to the same value.
struct MutationTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            var value = state
            value ^= value >> 33
            value = value &* 0xff51afd7ed558ccd
            return value ^ (value >> 33)
        }
    }

    static let seeds: [[UInt8]] = [
        MessageCodec.encode(RequestEnvelope(id: 1, request: .hello)),
        MessageCodec.encode(RequestEnvelope(id: 2, request: .status(StatusQuery(permissions: [.camera, .location],
                                                                                  user: "alice")))),
        MessageCodec.encode(RequestEnvelope(id: 3, request: .request(AccessRequest(
            permissions: [.microphone], reason: "a \"call\"", scope: .duration(seconds: 60))))),
    ]

    static let tokens: [[UInt8]] = ["{", "}", "[", "]", ",", ":", "\"", "\\", "\\u", "null", "true", "1e9", "-0",
                                    "\"version\"", "\"id\"", "\"type\"", "\u{0}", "\u{ff}", "é"].map { Array($0.utf8) }

    static func mutate(_ seed: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = seed
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<4, using: &random) {
            case 0 where !bytes.isEmpty: bytes.remove(at: position)
            case 1: bytes.insert(UInt8.random(in: 0...255, using: &random), at: position)
            case 2 where !bytes.isEmpty: bytes[position] = UInt8.random(in: 0...255, using: &random)
            default: bytes.insert(contentsOf: tokens.randomElement(using: &random)!, at: position)
            }
        }
        return bytes
    }

    @Test func mutatedRequestsAreDecodedOrRefusedNeverCrash() throws {
        var random = Generator(state: 20261129)
        var accepted = 0
        for round in 0..<20_000 {
            let bytes = Self.mutate(Self.seeds[round % Self.seeds.count], &random)
            guard let envelope = try? MessageCodec.decodeRequest(bytes) else { continue }
            accepted += 1
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope, "\(bytes)")
        }
        #expect(accepted > 0, "some mutations (whitespace, ids) stay valid")
    }

    @Test func mutatedRepliesAreDecodedOrRefusedNeverCrash() throws {
        var random = Generator(state: 7)
        let seed = MessageCodec.encode(ReplyEnvelope(id: 5, reply: .status(StatusReply(
            user: "alice", uid: 1000, permissions: ReplyCodingTests.richStatus))))
        for _ in 0..<5_000 {
            let bytes = Self.mutate(seed, &random)
            guard let envelope = try? MessageCodec.decodeReply(bytes) else { continue }
            #expect(try MessageCodec.decodeReply(MessageCodec.encode(envelope)) == envelope)
        }
    }
}
