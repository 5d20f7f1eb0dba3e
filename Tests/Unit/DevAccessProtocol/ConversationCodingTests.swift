import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// The request conversation and the approval queue, both directions, held to the same
/// strict rules as the rest.
struct ConversationCodingTests {
    static let prompt = PromptMessage(
        prompt: 1, kind: .ask, permissions: [.camera, .microphone], user: "alice", program: "/usr/bin/cheese",
        reason: "video call", devices: [PromptDevice(permission: .camera, id: "camera:x", name: "Integrated Camera")],
        text: "Allow /usr/bin/cheese to use the camera and the microphone?\n  reason: video call",
        choices: [PromptChoice(allow: .once, label: "Allow once"),
                  PromptChoice(allow: .duration(seconds: 3600), label: "Allow for 1h"),
                  PromptChoice(allow: .always, label: "Allow always"),
                  PromptChoice(choice: .deny, label: "Deny")],
        timeout: 60)

    static let password = PromptMessage(
        prompt: 2, kind: .password, permissions: [.camera], user: "alice", program: nil, reason: nil, devices: [],
        text: "Policy asks alice to confirm with their password.", choices: [], timeout: 60, attempt: 1, attempts: 3)

    static let results = [
        RequestResult(permission: .camera, outcome: .granted, how: .consent, grant: 12, term: .duration,
                      expires: "2026-12-01T10:00:00Z", message: "camera allowed until 2026-12-01T10:00:00Z"),
        RequestResult(permission: .microphone, outcome: .undecided, why: .timeout, message: "no decision"),
        RequestResult(permission: .location, outcome: .pending, pending: 4, message: "waiting"),
    ]

    static let replies: [ReplyEnvelope] = [
        ReplyEnvelope(id: 3, reply: .prompt(prompt)),
        ReplyEnvelope(id: 3, reply: .prompt(password)),
        ReplyEnvelope(id: 3, reply: .queued(QueuedReply(pending: 4, permissions: [.location], new: true, waiting: false))),
        ReplyEnvelope(id: 3, reply: .decision(DecisionReply(user: "alice", uid: 1000, results: results,
                                                            permissions: ReplyCodingTests.richStatus))),
        ReplyEnvelope(id: 8, reply: .pending(PendingListReply(requests: [
            PendingItem(pending: 4, user: "alice", uid: 1000, program: "/usr/bin/cheese", permissions: [.location],
                        reason: "maps", term: .duration(seconds: 600), created: "2026-11-29T10:00:00Z"),
            PendingItem(pending: 5, user: "bob", uid: 1001, program: nil, permissions: [.camera], reason: nil,
                        term: nil, created: "2026-11-29T10:01:00Z"),
        ]))),
        ReplyEnvelope(id: 9, reply: .resolved(ResolvedReply(pending: 4, resolution: .rejected, user: "alice", uid: 1000,
                                                             results: [RequestResult(permission: .location, outcome: .denied,
                                                                                     how: .admin, grant: 13, term: .always,
                                                                                     message: "denied")]))),
    ]

    @Test func repliesRoundTripExactly() throws {
        for envelope in Self.replies {
            let line = MessageCodec.encode(envelope)
            #expect(!line.contains(0x0a))
            #expect(try MessageCodec.decodeReply(line) == envelope)
        }
    }

    @Test func requestsRoundTripExactly() throws {
        let envelopes = [
            RequestEnvelope(id: 3, request: .promptAnswer(PromptAnswer(prompt: 1, answer: .choice(.allow(.duration))))),
            RequestEnvelope(id: 3, request: .promptAnswer(PromptAnswer(prompt: 2, answer: .password("pa\"ss\\w\nörd")))),
            RequestEnvelope(id: 3, request: .promptAnswer(PromptAnswer(prompt: 1, answer: .cancel(.endOfInput)))),
            RequestEnvelope(id: 4, request: .pending),
            RequestEnvelope(id: 5, request: .approve(PendingAction(pending: 4))),
            RequestEnvelope(id: 6, request: .reject(PendingAction(pending: 4, reason: "not on lab machines"))),
        ]
        for envelope in envelopes {
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
    }

    @Test func answersAreStrict() {
        func rejected(_ text: String) -> ProtocolError? {
            do {
                _ = try MessageCodec.decodeRequest(Array(text.utf8))
                return nil
            } catch {
                return error.error
            }
        }
        let head = #"{"version":1,"id":3,"type":"prompt-answer","prompt":1,"#
        #expect(rejected(head + #""answer":"for"}"#) == nil)
        #expect(rejected(head + #""answer":"cancel"}"#) == nil, "why defaults to dismissed")
        #expect(rejected(head + #""answer":"maybe"}"#)?.context == "$.answer")
        #expect(rejected(head + #""answer":"password"}"#)?.reason == "missing field 'password'")
        #expect(rejected(head + #""answer":"once","password":"x"}"#)?.context == "$.password")
        #expect(rejected(head + #""answer":"once","why":"interrupted"}"#)?.context == "$.why")
        #expect(rejected(head + #""answer":"cancel","why":"bored"}"#)?.context == "$.why")
        let long = String(repeating: "x", count: 1025)
        let tooLong = rejected(head + #""answer":"password","password":""# + long + #""}"#)
        #expect(tooLong?.context == "$.password")
        #expect(tooLong.map { !$0.reason.contains("xxx") } == true, "a password never appears in an error")
        #expect(rejected(#"{"version":1,"id":3,"type":"prompt-answer","prompt":0,"answer":"once"}"#)?.context == "$.prompt")
        // A request may leave its scope to the policy, and wait.
        #expect(rejected(#"{"version":1,"id":3,"type":"request","permissions":["camera"]}"#) == nil)
        #expect(rejected(#"{"version":1,"id":3,"type":"request","permissions":["camera"],"scope":"once","wait":true}"#)
                == nil)
        #expect(rejected(#"{"version":1,"id":3,"type":"request","permissions":["camera"],"wait":1}"#)?.context == "$.wait")
        #expect(rejected(#"{"version":1,"id":3,"type":"request","permissions":["camera"],"duration":60}"#)?
                    .context == "$.duration")
        #expect(rejected(#"{"version":1,"id":3,"type":"approve"}"#)?.reason == "missing field 'pending'")
        #expect(rejected(#"{"version":1,"id":3,"type":"approve","pending":1,"user":"x"}"#)?.context == "$.user")
        // A rejection answers in the version of the message when it can be read.
        do {
            _ = try MessageCodec.decodeRequest(Array(#"{"version":1,"id":3,"type":"pending","all":true}"#.utf8))
            Issue.record("a pending with an unknown member was accepted")
        } catch {
            #expect(error.version == 1 && error.id == 3)
        }
    }

    @Test func promptsAreStrict() {
        func code(_ envelope: ReplyEnvelope, _ edit: (String) -> String) -> ErrorCode? {
            let text = edit(String(decoding: MessageCodec.encode(envelope), as: UTF8.self))
            do {
                _ = try MessageCodec.decodeReply(Array(text.utf8))
                return nil
            } catch {
                return error.code
            }
        }
        let ask = ReplyEnvelope(id: 3, reply: .prompt(Self.prompt))
        let password = ReplyEnvelope(id: 3, reply: .prompt(Self.password))
        #expect(code(ask) { $0 } == nil)
        #expect(code(ask) { $0.replacingOccurrences(of: #""kind":"ask""#, with: #""kind":"password""#) } == .badMessage,
                "a password prompt has no choices")
        #expect(code(password) { $0.replacingOccurrences(of: #""kind":"password""#, with: #""kind":"ask""#) }
                == .badMessage, "an ask prompt has choices")
        #expect(code(ask) { $0.replacingOccurrences(of: #"{"choice":"once","label":"Allow once"}"#,
                                                    with: #"{"choice":"deny","label":"No"}"#) } == .badMessage,
                "a choice offered twice")
        #expect(code(ask) { $0.replacingOccurrences(of: #""duration":3600,"#, with: "") } == .badMessage,
                "'for' needs its duration")
        #expect(code(password) { $0.replacingOccurrences(of: #""attempt":1"#, with: #""attempt":4"#) } == .badMessage)
        #expect(code(ask) { $0.replacingOccurrences(of: #""version":1"#, with: #""version":2"#) } == .unsupportedVersion)
        let decision = ReplyEnvelope(id: 3, reply: .decision(DecisionReply(user: "a", uid: 1, results: Self.results,
                                                                            permissions: [])))
        #expect(code(decision) { $0.replacingOccurrences(of: #""why":"timeout","#, with: "") } == .badMessage,
                "undecided names why")
        #expect(code(decision) { $0.replacingOccurrences(of: #""pending":4,"#, with: "") } == .badMessage,
                "pending names the request")
    }

    @Test func mutatedConversationMessagesNeverCrash() throws {
        var random = MutationTests.Generator(state: 5)
        let requests = [
            MessageCodec.encode(RequestEnvelope(id: 3, request: .promptAnswer(PromptAnswer(prompt: 1, answer: .password("pw"))))),
            MessageCodec.encode(RequestEnvelope(id: 4, request: .reject(PendingAction(pending: 2, reason: "no")))),
            MessageCodec.encode(RequestEnvelope(id: 5, request: .request(AccessRequest(permissions: [.camera], wait: true)))),
        ]
        for round in 0..<10_000 {
            let bytes = MutationTests.mutate(requests[round % requests.count], &random)
            guard let envelope = try? MessageCodec.decodeRequest(bytes) else { continue }
            #expect(try MessageCodec.decodeRequest(MessageCodec.encode(envelope)) == envelope)
        }
        for round in 0..<6_000 {
            let bytes = MutationTests.mutate(MessageCodec.encode(Self.replies[round % Self.replies.count]), &random)
            guard let envelope = try? MessageCodec.decodeReply(bytes) else { continue }
            #expect(try MessageCodec.decodeReply(MessageCodec.encode(envelope)) == envelope)
        }
    }
}
