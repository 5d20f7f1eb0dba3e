import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// Version 3: the operations that decide or record, and their `result`.
struct AdministrationCodingTests {
    static let requests: [Request] = [
        .decide(DecisionOrder(allow: true, permission: .camera, user: "alice", device: "camera:x",
                              expiresMilliseconds: 1_764_525_600_123, reason: "exam week")),
        .decide(DecisionOrder(allow: false, permission: .location, user: "1001")),
        .decide(DecisionOrder(allow: true, permission: .microphone, user: "bob", lastingSeconds: 5)),
        .setSwitch(SwitchOrder(permission: .camera, off: true, hard: true, reason: "exam", lastingSeconds: 7200)),
        .setSwitch(SwitchOrder(permission: .microphone, off: true, expiresMilliseconds: 1_764_525_600_123)),
        .revoke(RevokeOrder(permission: .microphone, user: "bob", device: "microphone:card0", reason: "left")),
        .revoke(RevokeOrder(permission: .camera, user: "4242")),
        .reset(ResetOrder(user: "carol")),
        .reset(ResetOrder(user: "carol", permission: .camera)),
        .list(ListQuery()),
        .list(ListQuery(user: "dave", permission: .camera, all: true)),
        .reconcile,
        .withdraw(PendingAction(pending: 7, reason: "not needed")),
        .withdraw(PendingAction(pending: 8)),
        .auditVerify(AuditVerifyQuery()),
        .auditVerify(AuditVerifyQuery(archive: "/var/lib/devaccess/audit-archive-x.db")),
        .auditArchive(AuditArchiveOrder(beforeMilliseconds: 1_764_525_600_123)),
        .auditArchive(AuditArchiveOrder(beforeMilliseconds: 0, to: "/srv/archive/2026.db")),
        .auditReport(AuditReportQuery(mode: .events)),
        .auditReport(AuditReportQuery(mode: .events, sinceMilliseconds: 1_764_525_600_123, untilMilliseconds: 1_764_525_700_000,
                                      user: "alice", program: "cheese", permission: .camera, device: "camera:x",
                                      types: ["grant", "revoke"], after: 41, limit: 500, verify: false)),
        .auditReport(AuditReportQuery(mode: .summary, permission: .microphone)),
        .auditReport(AuditReportQuery(mode: .event, event: 42)),
    ]

    @Test(arguments: requests)
    func requestsRoundTrip(_ request: Request) throws {
        let envelope = RequestEnvelope(id: 11, request: request)
        #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
    }

    func rejection(_ text: String) -> ProtocolError? {
        do {
            _ = try MessageCodec.decodeRequest(Array(text.utf8))
            return nil
        } catch {
            return error.error
        }
    }

    @Test func theyAreStrict() {
        #expect(rejection(#"{"version":1,"id":1,"type":"teleport"}"#)?.reason.contains("audit-verify") == true)
        #expect(rejection(#"{"version":1,"id":1,"type":"reconcile","force":true}"#)?.context == "$.force")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"maybe","permission":"camera","user":"a"}"#)?
            .context == "$.decision")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera","user":""}"#)?
            .context == "$.user")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera"}"#)?
            .reason == "missing field 'user'")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera","user":"a","expires":0}"#)?
            .context == "$.expires")
        // `for` (seconds from when devaccessd records it): positive, at most ten years, never with `expires`.
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera","user":"a","for":0}"#)?
            .context == "$.for")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera","user":"a","for":316224001}"#)?
            .context == "$.for")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"camera","user":"a","for":5,"expires":1764525600000}"#)?
            .reason.contains("not both") == true)
        #expect(rejection(#"{"version":1,"id":1,"type":"switch","permission":"camera","state":"on","for":5}"#)?.context == "$.for")
        #expect(rejection(#"{"version":1,"id":1,"type":"switch","permission":"camera","state":"off","for":5,"expires":1764525600000}"#)?
            .reason.contains("not both") == true)
        // A switch's end is `expires`, as a grant's: the old spelling is an unknown member.
        #expect(rejection(#"{"version":1,"id":1,"type":"switch","permission":"camera","state":"off","until":1764525600000}"#)?
            .context == "$.until")
        #expect(rejection(#"{"version":1,"id":1,"type":"decide","decision":"allow","permission":"cam","user":"a"}"#)?
            .code == .unknownPermission)
        #expect(rejection(#"{"version":1,"id":1,"type":"withdraw","pending":0}"#)?.context == "$.pending")
        #expect(rejection(#"{"version":1,"id":1,"type":"list","all":"yes"}"#)?.context == "$.all")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-archive"}"#)?.reason == "missing field 'before'")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"everything"}"#)?.context == "$.mode")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"event"}"#)?.context == "$.event")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"events","limit":1001}"#)?.context == "$.limit")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"events","types":"grant"}"#)?.context == "$.types")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-report","mode":"events","sql":"1=1"}"#)?.context == "$.sql")
        #expect(rejection(#"{"version":2,"id":1,"type":"audit-report","mode":"events"}"#)?.code == .unsupportedVersion)
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-archive","before":-1}"#)?.context == "$.before")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-archive","before":"90d"}"#)?.context == "$.before")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-archive","before":1,"to":"x.db"}"#)?.context == "$.to")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-archive","before":1,"vacuum":true}"#)?.context == "$.vacuum")
        #expect(rejection(#"{"version":1,"id":1,"type":"audit-verify","archive":7}"#)?.context == "$.archive")
        #expect(rejection(#"{"version":2,"id":1,"type":"audit-archive","before":1}"#)?.code == .unsupportedVersion)
        let long = String(repeating: "x", count: 1025)
        #expect(rejection(#"{"version":1,"id":1,"type":"revoke","permission":"camera","user":"a","reason":"\#(long)"}"#)?
            .context == "$.reason")
    }

    @Test func resultCarriesAnObjectDocument() throws {
        let document = JSONValue.object([JSONMember("grants", .array([])), JSONMember("ledger", .string("/x"))])
        let reply = ReplyEnvelope(id: 4, reply: .result(OperationResult(operation: "list", document: document)))
        let line = MessageCodec.encode(reply)
        #expect(String(decoding: line, as: UTF8.self)
                == #"{"version":1,"id":4,"type":"result","operation":"list","document":{"grants":[],"ledger":"/x"}}"#)
        #expect(try MessageCodec.decodeReply(line) == reply)
        func code(_ text: String) -> ErrorCode? {
            do {
                _ = try MessageCodec.decodeReply(Array(text.utf8))
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(#"{"version":1,"id":4,"type":"result","operation":"list","document":[]}"#) == .badMessage)
        #expect(code(#"{"version":2,"id":4,"type":"result","operation":"list","document":{}}"#) == .unsupportedVersion)
    }
}
