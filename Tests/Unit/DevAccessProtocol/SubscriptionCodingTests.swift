import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// `subscribe`/`update` and `open`/`opened`, both directions, as strict as the rest.
struct SubscriptionCodingTests {
    func rejection(_ text: String) -> ProtocolError? {
        do {
            _ = try MessageCodec.decodeRequest(Array(text.utf8))
            return nil
        } catch {
            return error.error
        }
    }

    @Test func requestsRoundTrip() throws {
        let requests: [Request] = [
            .subscribe(SubscribeQuery()), .subscribe(SubscribeQuery(permissions: [.camera, .location])),
            .open(OpenOrder(permission: .camera, device: "camera:x")),
            .open(OpenOrder(permission: .microphone, device: "microphone:card0", node: "/dev/snd/pcmC0D0c",
                            access: .read)),
        ]
        for request in requests {
            let envelope = RequestEnvelope(id: 5, request: request)
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
    }

    @Test func repliesRoundTrip() throws {
        let status = PermissionStatus(permission: .camera, status: .authorized, devices: [],
                                      reasons: [Reason(.summary, "alice can use all 1 camera device(s)")])
        let replies: [Reply] = [
            .update(StatusUpdate(user: "alice", uid: 1000, cause: "decide", permissions: [status])),
            .opened(OpenedReply(permission: .camera, device: "camera:x", node: "/dev/video0", access: .readWrite)),
        ]
        for reply in replies {
            let envelope = ReplyEnvelope(id: 5, reply: reply)
            #expect(try MessageCodec.decodeReply(MessageCodec.encode(envelope)) == envelope)
        }
        #expect(Reply.update(StatusUpdate(user: "a", uid: 1, cause: "c", permissions: [])).isInterim)
    }

    @Test func badFieldsAreRefused() {
        #expect(rejection(#"{"version":1,"id":1,"type":"subscribe","every":5}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":1,"id":1,"type":"subscribe","permissions":[]}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":1,"id":1,"type":"open","permission":"camera","device":"d","access":"rwx"}"#)?
            .context == "$.access")
        #expect(rejection(#"{"version":1,"id":1,"type":"open","permission":"camera","device":"d","access":"---"}"#)?
            .code == .badMessage)
        #expect(rejection(#"{"version":1,"id":1,"type":"open","permission":"camera"}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":1,"id":1,"type":"open","permission":"speaker","device":"d"}"#)?.code
            == .unknownPermission)
    }

    /// audit-report's `timeline`, `wait` and `archives` go both ways.
    @Test func auditReportsFollowAndArchiveMembersRoundTrip() throws {
        for query in [AuditReportQuery(mode: .events, waitSeconds: 25), AuditReportQuery(mode: .events, timeline: true),
                      AuditReportQuery(mode: .summary, archives: ["/var/lib/devaccess/archive-1.db"])] {
            let envelope = RequestEnvelope(id: 3, request: .auditReport(query))
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"events","wait":5}"#) == nil)
    }

    /// `run`'s `accuracy`: the level a run given location asks for, both ways.
    @Test func aRunsAccuracyRoundTrips() throws {
        let leveled = Request.run(RunOrder(program: "/bin/true", arguments: ["/bin/true"], environment: [], directory: "/",
                                           umask: 0o22, permissions: [.location], accuracy: .city))
        let envelope = RequestEnvelope(id: 4, request: leveled)
        #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        let run = #"{"version":1,"id":1,"type":"run","program":"/bin/true","arguments":["/bin/true"],"environment":[],"directory":"/","umask":18,"permissions":["location"],"accuracy":"city"}"#
        #expect(rejection(run) == nil)
    }
}
