import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// Every way a request can be refused, one test each: the code, the place named in
/// `context`, and whether the broker would close the connection afterwards.
struct StrictDecodingTests {
    func rejection(_ text: String) -> MessageCodec.Rejection? {
        do {
            _ = try MessageCodec.decodeRequest(Array(text.utf8))
            return nil
        } catch {
            return error
        }
    }

    func expectRejected(_ text: String, _ code: ErrorCode, context: String? = nil, reasonContains: String? = nil,
                        id: Int64 = 0, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let rejected = rejection(text) else {
            Issue.record("accepted: \(text)", sourceLocation: sourceLocation)
            return
        }
        #expect(rejected.error.code == code, "\(text) -> \(rejected.error)", sourceLocation: sourceLocation)
        if let context {
            #expect(rejected.error.context == context, "\(text) -> \(rejected.error)", sourceLocation: sourceLocation)
        }
        if let reasonContains {
            #expect(rejected.error.reason.contains(reasonContains), "\(text) -> \(rejected.error)",
                    sourceLocation: sourceLocation)
        }
        #expect(rejected.id == id, "\(text): id \(rejected.id)", sourceLocation: sourceLocation)
    }

    // MARK: JSON

    @Test func malformedJSONIsBadJSONWithTheByteOffset() {
        expectRejected(#"{"version":1,"id":1,"type":"hello""#, .badJSON, context: "byte 34", reasonContains: "expected ',' or '}'")
        expectRejected(#"{"version":1 "id":1}"#, .badJSON, reasonContains: "expected ',' or '}'")
        expectRejected(#"{version:1}"#, .badJSON, context: "byte 1", reasonContains: "expected a string key")
        expectRejected("not json", .badJSON, context: "byte 0")
        expectRejected(#"{"version":1,"id":1,"type":"hello"} {}"#, .badJSON, reasonContains: "after the end of the JSON value")
        expectRejected(#"{"version":01,"id":1,"type":"hello"}"#, .badJSON, reasonContains: "leading zeros")
        expectRejected(#"{"version":1,"id":1,"type":"hello",}"#, .badJSON)
        expectRejected(#"{"version":tru,"id":1,"type":"hello"}"#, .badJSON, reasonContains: "expected 'true'")
    }

    @Test func emptyLineIsBadJSON() {
        expectRejected("", .badJSON, reasonContains: "empty message")
        expectRejected("   \r", .badJSON, reasonContains: "empty message")
    }

    @Test func aMessageMustBeAnObject() {
        expectRejected("[1,2]", .badJSON, context: "$", reasonContains: "not an array")
        expectRejected("42", .badJSON, context: "$")
        expectRejected("null", .badJSON, context: "$")
    }

    @Test func duplicateKeysAreRefused() {
        expectRejected(#"{"version":1,"id":1,"id":2,"type":"hello"}"#, .badJSON, context: "byte 20",
                       reasonContains: "duplicate key 'id'")
    }

    @Test func strings_mustBeValidUTF8WithoutNulOrRawControlCharacters() {
        var invalidUTF8 = Array(#"{"version":1,"id":1,"type":"status","user":""#.utf8)
        invalidUTF8 += [0xff, 0xfe] + Array(#""}"#.utf8)
        do {
            _ = try MessageCodec.decodeRequest(invalidUTF8)
            Issue.record("invalid UTF-8 accepted")
        } catch {
            #expect(error.error.code == .badJSON)
            #expect(error.error.reason.contains("UTF-8"))
        }
        expectRejected(#"{"version":1,"id":1,"type":"status","user":"a\u0000b"}"#, .badJSON, reasonContains: "U+0000")
        expectRejected("{\"version\":1,\"id\":1,\"type\":\"status\",\"user\":\"a\u{01}b\"}", .badJSON,
                       reasonContains: "must be escaped")
        expectRejected(#"{"version":1,"id":1,"type":"status","user":"\ud800"}"#, .badJSON, reasonContains: "surrogate")
        expectRejected(#"{"version":1,"id":1,"type":"status","user":"\q"}"#, .badJSON, reasonContains: "invalid escape")
    }

    @Test func deepNestingIsRefusedBeforeItCanExhaustTheStack() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        expectRejected(#"{"version":1,"id":1,"type":"hello","x":"# + deep + "}", .badJSON, reasonContains: "nested deeper")
    }

    // MARK: Envelope

    @Test func versionIsRequiredAndMustBeAnInteger() {
        expectRejected(#"{"id":3,"type":"hello"}"#, .badMessage, context: "$", reasonContains: "missing field 'version'", id: 3)
        expectRejected(#"{"version":"1","id":3,"type":"hello"}"#, .badMessage, context: "$.version",
                       reasonContains: "found a string", id: 3)
        expectRejected(#"{"version":1.0,"id":3,"type":"hello"}"#, .badMessage, context: "$.version", id: 3)
    }

    @Test func unknownVersionNamesTheSupportedOne() {
        expectRejected(#"{"version":9,"id":9,"type":"hello"}"#, .unsupportedVersion, context: "$.version",
                       reasonContains: "protocol version 9 is not supported; this broker speaks version 1", id: 9)
        // Every other version: there is one, 1. The rejection answers in version 1.
        for version in [0, 2, 3, 4, 5, 6, 7, 8, -1, 9_007_199_254_740_993] {
            expectRejected(#"{"version":\#(version),"id":9,"type":"status"}"#, .unsupportedVersion, context: "$.version",
                           reasonContains: "protocol version \(version) is not supported; this broker speaks version 1", id: 9)
            #expect(rejection(#"{"version":\#(version),"id":9,"type":"status"}"#)?.version == 1, "version \(version)")
        }
        #expect(BrokerProtocol.version == 1 && BrokerProtocol.supportedVersions == [1])
        // Checked before the rest: a message of another version may have any shape.
        expectRejected(#"{"version":10,"id":9,"type":"teleport","what":{}}"#, .unsupportedVersion, id: 9)
        #expect(ErrorCode.unsupportedVersion.closesConnection)
    }

    @Test func idMustBeAPositiveSafeInteger() {
        expectRejected(#"{"version":1,"type":"hello"}"#, .badMessage, reasonContains: "missing field 'id'")
        expectRejected(#"{"version":1,"id":0,"type":"hello"}"#, .badMessage, context: "$.id", reasonContains: "out of range")
        expectRejected(#"{"version":1,"id":-4,"type":"hello"}"#, .badMessage, context: "$.id")
        expectRejected(#"{"version":1,"id":9007199254740992,"type":"hello"}"#, .badMessage, context: "$.id")
        expectRejected(#"{"version":1,"id":"7","type":"hello"}"#, .badMessage, context: "$.id")
        expectRejected(#"{"version":1,"id":7.5,"type":"hello"}"#, .badMessage, context: "$.id")
        expectRejected(#"{"version":1,"id":1e3,"type":"hello"}"#, .badMessage, context: "$.id")
        expectRejected(#"{"version":1,"id":99999999999999999999999,"type":"hello"}"#, .badMessage, context: "$.id")
    }

    @Test func typeIsRequiredAndMustBeKnown() {
        expectRejected(#"{"version":1,"id":4}"#, .badMessage, reasonContains: "missing field 'type'", id: 4)
        expectRejected(#"{"version":1,"id":4,"type":7}"#, .badMessage, context: "$.type", id: 4)
        expectRejected(#"{"version":1,"id":4,"type":"grant"}"#, .unknownType, context: "$.type",
                       reasonContains: "unknown request type 'grant'", id: 4)
    }

    // MARK: Fields

    @Test func unknownFieldsAreRefusedAtTheTopLevel() {
        expectRejected(#"{"version":1,"id":5,"type":"hello","uid":0}"#, .badMessage, context: "$.uid",
                       reasonContains: "unknown field 'uid'", id: 5)
        expectRejected(#"{"version":1,"id":5,"type":"status","uid":0,"pid":1}"#, .badMessage,
                       reasonContains: "unknown fields 'uid', 'pid'", id: 5)
    }

    @Test func unknownFieldsWinOverUnknownPermissions() {
        // The closing error is reported, so a broken message never keeps the connection.
        expectRejected(#"{"version":1,"id":5,"type":"status","permissions":["speaker"],"extra":true}"#, .badMessage,
                       context: "$.extra", id: 5)
    }

    @Test func nullIsNeverAValue() {
        expectRejected(#"{"version":1,"id":6,"type":"status","user":null}"#, .badMessage, context: "$.user",
                       reasonContains: "found null", id: 6)
    }

    @Test func wrongTypesNameTheField() {
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":"camera"}"#, .badMessage,
                       context: "$.permissions", reasonContains: "expected an array", id: 6)
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":["camera",3]}"#, .badMessage,
                       context: "$.permissions[1]", reasonContains: "expected a string, found the integer 3", id: 6)
        expectRejected(#"{"version":1,"id":6,"type":"status","user":1000}"#, .badMessage, context: "$.user", id: 6)
    }

    @Test func permissionListsAreNonEmptyAndDistinct() {
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":[]}"#, .badMessage, context: "$.permissions", id: 6)
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":["camera","camera"]}"#, .badMessage,
                       context: "$.permissions[1]", reasonContains: "listed twice", id: 6)
    }

    @Test func unknownPermissionKeepsTheConnection() {
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":["speaker"]}"#, .unknownPermission,
                       context: "$.permissions[0]", reasonContains: "knows: camera, microphone, location", id: 6)
        expectRejected(#"{"version":1,"id":6,"type":"status","permissions":["Camera"]}"#, .unknownPermission, id: 6)
        #expect(!ErrorCode.unknownPermission.closesConnection)
    }

    @Test func emptyUserIsRefused() {
        expectRejected(#"{"version":1,"id":6,"type":"status","user":""}"#, .badMessage, context: "$.user", id: 6)
    }

    @Test func requestScopeAndDurationGoTogether() {
        expectRejected(#"{"version":1,"id":8,"type":"request","permissions":["camera"],"scope":"for"}"#, .badMessage,
                       reasonContains: "missing field 'duration'", id: 8)
        expectRejected(#"{"version":1,"id":8,"type":"request","permissions":["camera"],"scope":"once","duration":5}"#,
                       .badMessage, context: "$.duration", reasonContains: "only with scope 'for'", id: 8)
        expectRejected(#"{"version":1,"id":8,"type":"request","permissions":["camera"],"scope":"for","duration":0}"#,
                       .badMessage, context: "$.duration", id: 8)
        expectRejected(#"{"version":1,"id":8,"type":"request","permissions":["camera"],"scope":"forever"}"#,
                       .badMessage, context: "$.scope", reasonContains: "not one of: once, for, always", id: 8)
        expectRejected(#"{"version":1,"id":8,"type":"request","scope":"once"}"#, .badMessage,
                       reasonContains: "missing field 'permissions'", id: 8)
    }

    @Test func overlongStringsAreRefused() {
        let reason = String(repeating: "x", count: 1025)
        expectRejected(#"{"version":1,"id":8,"type":"request","permissions":["camera"],"scope":"once","reason":""#
                       + reason + #""}"#, .badMessage, context: "$.reason", reasonContains: "longer than 1024", id: 8)
    }

    // MARK: Accepted

    @Test func validRequestsDecode() throws {
        #expect(try MessageCodec.decodeRequest(Array(#"{"version":1,"id":1,"type":"hello"}"#.utf8))
                == RequestEnvelope(id: 1, request: .hello, version: 1))
        #expect(try MessageCodec.decodeRequest(Array(#" {"type":"status","id":2,"version":1} "#.utf8))
                == RequestEnvelope(id: 2, request: .status(StatusQuery()), version: 1))
        let status = try MessageCodec.decodeRequest(Array(
            #"{"version":1,"id":3,"type":"status","permissions":["location","camera"],"user":"alice"}"#.utf8))
        #expect(status == RequestEnvelope(id: 3, request: .status(StatusQuery(permissions: [.location, .camera], user: "alice")),
                                          version: 1))
        let request = try MessageCodec.decodeRequest(Array(
            #"{"version":1,"id":4,"type":"request","permissions":["microphone"],"reason":"call \u00e9\ud83d\ude00","scope":"for","duration":3600}"#.utf8))
        #expect(request == RequestEnvelope(id: 4, request: .request(AccessRequest(
            permissions: [.microphone], reason: "call é😀", scope: .duration(seconds: 3600))), version: 1))
        // The scope may be left to the policy.
        #expect(try MessageCodec.decodeRequest(Array(#"{"version":1,"id":5,"type":"hello"}"#.utf8))
                == RequestEnvelope(id: 5, request: .hello, version: 1))
        let open = try MessageCodec.decodeRequest(Array(
            #"{"version":1,"id":6,"type":"request","permissions":["camera"],"wait":true}"#.utf8))
        #expect(open == RequestEnvelope(id: 6, request: .request(AccessRequest(permissions: [.camera], wait: true)),
                                        version: 1))
    }

    @Test func encodedRequestsDecodeToThemselves() throws {
        let envelopes = [
            RequestEnvelope(id: 1, request: .hello),
            RequestEnvelope(id: 2, request: .status(StatusQuery())),
            RequestEnvelope(id: 3, request: .status(StatusQuery(permissions: [.camera], user: "1000"))),
            RequestEnvelope(id: 4, request: .request(AccessRequest(permissions: [.camera, .location],
                                                                   reason: "quote \" backslash \\ newline \n tab \t",
                                                                   scope: .always))),
            RequestEnvelope(id: 9_007_199_254_740_991, request: .request(AccessRequest(permissions: [.microphone], scope: .once))),
            RequestEnvelope(id: 5, request: .request(AccessRequest(permissions: [.camera], scope: .always)), version: 1),
            RequestEnvelope(id: 6, request: .request(AccessRequest(permissions: [.camera, .microphone], reason: "x",
                                                                   wait: true))),
        ]
        for envelope in envelopes {
            let line = MessageCodec.encode(envelope)
            #expect(!line.contains(0x0a), "an encoded message never holds a newline")
            #expect(try MessageCodec.decodeRequest(line) == envelope)
        }
    }
}
