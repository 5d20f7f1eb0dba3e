import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// `MessageCodec.decodeStatusRequest`, the event loop's shortcut for the common status
/// request: whatever it accepts, the full decoder decodes to the same envelope; whatever
/// else comes is left to the full decoder (nil), never refused or guessed at.
struct StatusRequestFastPathTests {
    static func full(_ line: [UInt8]) -> RequestEnvelope? { try? MessageCodec.decodeRequest(line) }

    static let accepted: [(String, RequestEnvelope)] = [
        (#"{"version":1,"id":1,"type":"status"}"#, RequestEnvelope(id: 1, request: .status(StatusQuery()), version: 1)),
        (#"{"version": 1, "id": 12, "type": "status"}"#,
         RequestEnvelope(id: 12, request: .status(StatusQuery()), version: 1)),
        (#"{"version":1,"id":9007199254740991,"type":"status","permissions":["camera"]}"#,
         RequestEnvelope(id: 9_007_199_254_740_991, request: .status(StatusQuery(permissions: [.camera])), version: 1)),
        (#" { "version" : 1 , "id" : 3 , "type" : "status" , "permissions" : [ "location" , "camera" ] } "#,
         RequestEnvelope(id: 3, request: .status(StatusQuery(permissions: [.location, .camera])), version: 1)),
        (#"{"version":1,"id":5,"type":"status","permissions":["microphone","camera","location"]}"#,
         RequestEnvelope(id: 5, request: .status(StatusQuery(permissions: [.microphone, .camera, .location])),
                         version: 1)),
    ]

    /// Left to the full decoder: other shapes, other orders, other values, anything odd.
    static let declined: [String] = [
        #"{"id":1,"version":1,"type":"status"}"#,
        #"{"version":1,"id":1,"type":"status","user":"root"}"#,
        #"{"version":1,"id":1,"type":"status","permissions":["camera"],"user":"root"}"#,
        #"{"version":1,"id":1,"type":"status","permissions":[]}"#,
        #"{"version":1,"id":1,"type":"status","permissions":["camera","camera"]}"#,
        #"{"version":1,"id":1,"type":"status","permissions":["Camera"]}"#,
        #"{"version":1,"id":1,"type":"status","permissions":["speaker"]}"#,
        #"{"version":1,"id":1,"type":"status","permissions":"camera"}"#,
        #"{"version":1,"id":1,"type":"hello"}"#,
        #"{"version":1,"id":1,"type":"status","type":"status"}"#,
        #"{"version":1,"id":1,"type":"stat\u0075s"}"#,
        #"{"version":9,"id":1,"type":"status"}"#,
        #"{"version":2,"id":1,"type":"status"}"#,
        #"{"version":0,"id":1,"type":"status"}"#,
        #"{"version":06,"id":1,"type":"status"}"#,
        #"{"version":6.0,"id":1,"type":"status"}"#,
        #"{"version":1,"id":0,"type":"status"}"#,
        #"{"version":1,"id":-1,"type":"status"}"#,
        #"{"version":1,"id":1e2,"type":"status"}"#,
        #"{"version":1,"id":9007199254740992,"type":"status"}"#,
        #"{"version":1,"id":12345678901234567890,"type":"status"}"#,
        #"{"version":1,"id":1,"type":"status",}"#,
        #"{"version":1,"id":1,"type":"status"}x"#,
        #"{"version":1,"id":1,"type":"status"}}"#,
        "{\"version\":1,\"id\":1,\"type\":\"status\"}\t",
        "{\"version\":1,\"id\":1,\r\"type\":\"status\"}",
        #"{"version":1,"id":1,"type":"status""#,
        #"[{"version":1,"id":1,"type":"status"}]"#,
        "",
    ]

    @Test func theCommonShapesAreRecognisedAsTheFullDecoderReadsThem() throws {
        for (text, expected) in Self.accepted {
            let line = Array(text.utf8)
            #expect(MessageCodec.decodeStatusRequest(line) == expected, "\(text)")
            #expect(Self.full(line) == expected, "\(text)")
        }
    }

    @Test func everythingElseIsLeftToTheFullDecoder() {
        for text in Self.declined {
            #expect(MessageCodec.decodeStatusRequest(Array(text.utf8)) == nil, "\(text)")
        }
    }

    /// Every single-byte change, deletion and truncation of the accepted lines: what the
    /// shortcut accepts, the full decoder decodes to the same envelope.
    @Test func noMutationIsReadOtherwiseThanByTheFullDecoder() {
        let replacements = Array("{}[]\",: 0123456789-.eEabcdilmnoprstuvx\\\t".utf8) + [0x00, 0x7f, 0xc3, 0xff]
        var checked = 0
        for (text, _) in Self.accepted {
            let line = Array(text.utf8)
            var variants: [[UInt8]] = []
            for position in line.indices {
                var deleted = line
                deleted.remove(at: position)
                variants.append(deleted)
                variants.append(Array(line[..<position]))
                for byte in replacements where byte != line[position] {
                    var changed = line
                    changed[position] = byte
                    variants.append(changed)
                    var inserted = line
                    inserted.insert(byte, at: position)
                    variants.append(inserted)
                }
            }
            for variant in variants {
                guard let fast = MessageCodec.decodeStatusRequest(variant) else { continue }
                checked += 1
                #expect(Self.full(variant) == fast, "\(String(decoding: variant, as: UTF8.self))")
            }
        }
        #expect(checked > 100, "the mutations exercised the shortcut")
    }
}
