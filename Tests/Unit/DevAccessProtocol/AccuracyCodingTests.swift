import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// `accuracy`: a location level on `decide`, `request`, their results, pending items and
/// statuses. Anything but one of the five words, or a level where it means nothing, is
/// refused with the field named: a client never gets a level it did not spell exactly.
struct AccuracyCodingTests {
    @Test(arguments: LocationAccuracy.allCases)
    func requestsRoundTrip(_ level: LocationAccuracy) throws {
        for request in [
            Request.request(AccessRequest(permissions: [.camera, .location], scope: .always, accuracy: level)),
            .decide(DecisionOrder(allow: true, permission: .location, user: "alice", accuracy: level)),
        ] {
            let envelope = RequestEnvelope(id: 5, request: request)
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
            #expect(String(decoding: MessageCodec.encode(envelope), as: UTF8.self).contains("\"accuracy\":\"\(level)\""))
        }
    }

    @Test func repliesRoundTrip() throws {
        let status = PermissionStatus(permission: .location, status: .limited, devices: [],
                                      reasons: [Reason(.summary, "city")], accuracy: .city)
        let result = RequestResult(permission: .location, outcome: .granted, how: .policy, grant: 3, term: .always,
                                   accuracy: .city, message: "allowed at city accuracy")
        let item = PendingItem(pending: 2, user: "a", uid: 1, program: nil, permissions: [.location], reason: nil,
                               term: nil, accuracy: .street, created: "2026-11-29T10:00:00Z")
        for reply in [Reply.decision(DecisionReply(user: "a", uid: 1, results: [result], permissions: [status])),
                      .pending(PendingListReply(requests: [item]))] {
            let envelope = ReplyEnvelope(id: 4, reply: reply)
            #expect(try MessageCodec.decodeReply(MessageCodec.encode(envelope)) == envelope)
        }
    }

    func rejection(_ text: String) -> ProtocolError? {
        do {
            _ = try MessageCodec.decodeRequest(Array(text.utf8))
            return nil
        } catch {
            return error.error
        }
    }

    @Test func notALevelIsRefusedNamingTheField() throws {
        let request = #"{"version":1,"id":1,"type":"request","permissions":["location"],"accuracy":"#
        let decide = #"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"location","user":"a","accuracy":"#
        for body in [#""precise""#, #""EXACT""#, #""exact ""#, #""""#, "null", "1", "true", #"["city"]"#, #"{"level":"city"}"#] {
            for head in [request, decide] {
                let error = try #require(rejection(head + body + "}"), "\(head + body)")
                #expect(error.code == .badMessage && error.context == "$.accuracy", "\(body): \(error)")
            }
        }
        #expect(rejection(request + #""precise"}"#)?.reason
                    == "'precise' is not one of: exact, street, neighborhood, city, country")
    }

    @Test func aLevelWhereItMeansNothingIsRefused() {
        // Not with camera only, not on a denial, not twice.
        let camera = rejection(#"{"version":1,"id":1,"type":"request","permissions":["camera"],"accuracy":"city"}"#)
        #expect(camera?.context == "$.accuracy" && camera?.reason.contains("goes only with permission location") == true)
        let deny = rejection(#"{"version":1,"id":1,"type":"decide","decision":"deny","permission":"location","user":"a","accuracy":"city"}"#)
        #expect(deny?.context == "$.accuracy")
        let microphone = rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"microphone","user":"a","accuracy":"city"}"#)
        #expect(microphone?.context == "$.accuracy")
        #expect(rejection(#"{"version":1,"id":1,"type":"request","permissions":["location"],"accuracy":"city","accuracy":"exact"}"#)
                    != nil)
        // A reply carries the level.
        let status = PermissionStatus(permission: .location, status: .limited, devices: [], reasons: [], accuracy: .city)
        let leveled = String(decoding: MessageCodec.encode(ReplyEnvelope(id: 1, reply: .status(StatusReply(
            user: "a", uid: 1, permissions: [status])))), as: UTF8.self)
        #expect(leveled.contains(#""accuracy":"city""#) && leveled.contains("\"limited\""), "\(leveled)")
        // A reply claiming a level for the camera is refused by the client as well.
        let reply = #"{"version":1,"id":1,"type":"decision","user":"a","uid":1,"results":[{"permission":"camera","outcome":"granted","accuracy":"city","message":"m"}],"permissions":[]}"#
        #expect(throws: ProtocolError.self) { try MessageCodec.decodeReply(Array(reply.utf8)) }
    }
}
