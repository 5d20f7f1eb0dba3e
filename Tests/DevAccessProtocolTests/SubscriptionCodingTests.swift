import Testing
import DevAccessCore
@testable import DevAccessProtocol

/// Version 7: `subscribe`/`update` and `open`/`opened`, both directions, as strict as the rest.
struct SubscriptionCodingTests {
    func rejection(_ text: String) -> ProtocolError? {
        do {
            _ = try MessageCodec.decodeRequest(Array(text.utf8))
            return nil
        } catch {
            return error.error
        }
    }

    @Test func requestsRoundTripInVersion7() throws {
        let requests: [Request] = [
            .subscribe(SubscribeQuery()), .subscribe(SubscribeQuery(permissions: [.camera, .location])),
            .open(OpenOrder(permission: .camera, device: "camera:x")),
            .open(OpenOrder(permission: .microphone, device: "microphone:card0", node: "/dev/snd/pcmC0D0c",
                            access: .read)),
        ]
        for request in requests {
            #expect(request.writtenVersion == 7)
            let envelope = RequestEnvelope(id: 5, request: request, version: request.writtenVersion)
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
        #expect(Request.hello.writtenVersion == BrokerProtocol.version)
    }

    @Test func repliesRoundTrip() throws {
        let status = PermissionStatus(permission: .camera, status: .authorized, devices: [],
                                      reasons: [Reason(.summary, "alice can use all 1 camera device(s)")])
        let replies: [Reply] = [
            .update(StatusUpdate(user: "alice", uid: 1000, cause: "decide", permissions: [status])),
            .opened(OpenedReply(permission: .camera, device: "camera:x", node: "/dev/video0", access: .readWrite)),
        ]
        for reply in replies {
            let envelope = ReplyEnvelope(id: 5, reply: reply, version: 7)
            #expect(try MessageCodec.decodeReply(MessageCodec.encode(envelope)) == envelope)
        }
        #expect(Reply.update(StatusUpdate(user: "a", uid: 1, cause: "c", permissions: [])).isInterim)
    }

    @Test func olderVersionsAndBadFieldsAreRefused() {
        #expect(rejection(#"{"version":6,"id":1,"type":"subscribe"}"#)?.code == .unknownType)
        #expect(rejection(#"{"version":6,"id":1,"type":"open","permission":"camera","device":"d"}"#)?.code == .unknownType)
        #expect(rejection(#"{"version":7,"id":1,"type":"subscribe","every":5}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":7,"id":1,"type":"subscribe","permissions":[]}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":7,"id":1,"type":"open","permission":"camera","device":"d","access":"rwx"}"#)?
            .context == "$.access")
        #expect(rejection(#"{"version":7,"id":1,"type":"open","permission":"camera","device":"d","access":"---"}"#)?
            .code == .badMessage)
        #expect(rejection(#"{"version":7,"id":1,"type":"open","permission":"camera"}"#)?.code == .badMessage)
        #expect(rejection(#"{"version":7,"id":1,"type":"open","permission":"speaker","device":"d"}"#)?.code
            == .unknownPermission)
    }

    /// audit-report's `timeline`, `wait` and `archives` are version 7's: written in 7 when
    /// used, refused as unknown members in an older message, so an older broker never
    /// answers a follow or an archive report as if it had not been asked.
    @Test func auditReportsNewMembersAreVersion7() throws {
        let plain = Request.auditReport(AuditReportQuery(mode: .events))
        #expect(plain.writtenVersion == BrokerProtocol.version)
        for query in [AuditReportQuery(mode: .events, waitSeconds: 25), AuditReportQuery(mode: .events, timeline: true),
                      AuditReportQuery(mode: .summary, archives: ["/var/lib/devaccess/archive-1.db"])] {
            let request = Request.auditReport(query)
            #expect(request.writtenVersion == 7)
            let envelope = RequestEnvelope(id: 3, request: request, version: request.writtenVersion)
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
        #expect(rejection(#"{"version":6,"id":1,"type":"audit-report","mode":"events","wait":5}"#)?.context == "$.wait")
        #expect(rejection(#"{"version":6,"id":1,"type":"audit-report","mode":"events","timeline":true}"#)?.context
                == "$.timeline")
        #expect(rejection(#"{"version":6,"id":1,"type":"audit-report","mode":"summary","archives":["/a"]}"#)?.context
                == "$.archives")
        #expect(rejection(#"{"version":7,"id":1,"type":"audit-report","mode":"events","wait":5}"#) == nil)
    }

    /// `run`'s `accuracy` came after version 7 was out: it is version 8's, written in 8 only
    /// when used, and an older message carrying it is refused, not read with the level dropped.
    @Test func aRunsAccuracyIsVersion8() throws {
        let plain = Request.run(RunOrder(program: "/bin/true", arguments: ["/bin/true"], environment: [], directory: "/",
                                         umask: 0o22, permissions: [.location]))
        #expect(plain.writtenVersion == BrokerProtocol.version)
        let leveled = Request.run(RunOrder(program: "/bin/true", arguments: ["/bin/true"], environment: [], directory: "/",
                                           umask: 0o22, permissions: [.location], accuracy: .city))
        #expect(leveled.writtenVersion == 8)
        let envelope = RequestEnvelope(id: 4, request: leveled, version: leveled.writtenVersion)
        #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        let run = #"{"id":1,"type":"run","program":"/bin/true","arguments":["/bin/true"],"environment":[],"directory":"/","umask":18,"permissions":["location"],"accuracy":"city"}"#
        for version in 5...7 {
            #expect(rejection(run.replacingOccurrences(of: #"{"id""#, with: #"{"version":\#(version),"id""#))?.context
                    == "$.accuracy", "version \(version)")
        }
        #expect(rejection(run.replacingOccurrences(of: #"{"id""#, with: #"{"version":8,"id""#)) == nil)
    }
}
