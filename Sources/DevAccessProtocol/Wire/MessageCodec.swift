import DevAccessCore
import DevAccessInterface

/// Turns envelopes into lines and lines into envelopes, by the rules in
/// StrictReader.swift. Lines are returned and taken without their newline.
public enum MessageCodec {
    /// A request that could not be decoded: the error to send back, and the request's
    /// id (0 otherwise) and version (else the broker's own) when they could be read.
    public struct Rejection: Error, Sendable, Hashable {
        public var id: Int64
        public var error: ProtocolError
        public var version: Int64

        public init(id: Int64, error: ProtocolError, version: Int64 = BrokerProtocol.version) {
            self.id = id
            self.error = error
            self.version = version
        }
    }

    // MARK: Requests

    public static func encode(_ envelope: RequestEnvelope) -> [UInt8] {
        var members = header(version: envelope.version, id: envelope.id, type: envelope.request.type)
        switch envelope.request {
        case .hello:
            break
        case .status(let query):
            if let permissions = query.permissions {
                members.append(JSONMember("permissions", .array(permissions.map { .string($0.rawValue) })))
            }
            if let user = query.user { members.append(JSONMember("user", .string(user))) }
        case .request(let request):
            members.append(JSONMember("permissions", .array(request.permissions.map { .string($0.rawValue) })))
            if let reason = request.reason { members.append(JSONMember("reason", .string(reason))) }
            members += ConversationCoding.encode(scope: request.scope)
            if request.wait { members.append(JSONMember("wait", .bool(true))) }
            if let accuracy = request.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
        case .promptAnswer(let answer):
            members += ConversationCoding.encode(answer)
        case .pending:
            break
        case .approve(let action), .reject(let action):
            members.append(JSONMember("pending", .integer(action.pending)))
            if let reason = action.reason { members.append(JSONMember("reason", .string(reason))) }
            if case .approve = envelope.request {
                members += ConversationCoding.encode(scope: action.scope)
            }
            if case .reject = envelope.request, action.deny {
                members.append(JSONMember("deny", .bool(true)))
            }
        case .withdraw, .decide, .revoke, .reset, .list, .reconcile, .auditVerify, .auditArchive, .auditReport,
             .setSwitch, .switches:
            members += AdministrationCoding.encode(envelope.request)
        case .run(let order):
            members += RunCoding.encode(order)
        case .runSignal(let signal):
            members.append(JSONMember("signal", .integer(Int64(signal.signal))))
        case .location(let query):
            members += LocationCoding.encode(query)
        case .subscribe(let query):
            members += SubscriptionCoding.encode(query)
        case .open(let order):
            members += SubscriptionCoding.encode(order)
        }
        return JSONWriter.bytes(.object(members))
    }

    /// The common status request, recognised without building a JSON tree: exactly
    /// `{"version":V,"id":N,"type":"status"}`, optionally with `"permissions":[...]` last,
    /// members in that order, spaces allowed between tokens, the version one this broker
    /// speaks, the id in range, the permissions known, each once. nil for anything else,
    /// which `decodeRequest` then decodes (and accepts or rejects) as always; what this
    /// accepts, `decodeRequest` decodes to the same envelope (MessageCodecTests).
    public static func decodeStatusRequest(_ line: [UInt8]) -> RequestEnvelope? {
        var scanner = StatusScanner(line)
        guard scanner.take("{"), scanner.take(#""version""#), scanner.take(":"), let version = scanner.integer(),
              BrokerProtocol.supportedVersions.contains(version),
              scanner.take(","), scanner.take(#""id""#), scanner.take(":"), let id = scanner.integer(),
              BrokerProtocol.requestIDs.contains(id),
              scanner.take(","), scanner.take(#""type""#), scanner.take(":"), scanner.take(#""status""#)
        else { return nil }
        var permissions: [Permission]?
        if scanner.take(",") {
            guard scanner.take(#""permissions""#), scanner.take(":"), scanner.take("[") else { return nil }
            var list: [Permission] = []
            repeat {
                guard let permission = scanner.permission(), !list.contains(permission) else { return nil }
                list.append(permission)
            } while scanner.take(",")
            guard scanner.take("]") else { return nil }
            permissions = list
        }
        guard scanner.take("}"), scanner.atEnd else { return nil }
        return RequestEnvelope(id: id, request: .status(StatusQuery(permissions: permissions)), version: version)
    }

    /// Tokens of `decodeStatusRequest`, each after optional spaces.
    private struct StatusScanner {
        let bytes: [UInt8]
        var position = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        mutating func skipSpaces() {
            while position < bytes.count && bytes[position] == UInt8(ascii: " ") { position += 1 }
        }

        var atEnd: Bool {
            mutating get {
                skipSpaces()
                return position == bytes.count
            }
        }

        /// Takes `token` (ASCII, no escapes) when it comes next.
        mutating func take(_ token: StaticString) -> Bool {
            skipSpaces()
            let count = token.utf8CodeUnitCount
            guard bytes.count - position >= count else { return false }
            let matches = token.withUTF8Buffer { expected in
                for offset in 0..<count where bytes[position + offset] != expected[offset] { return false }
                return true
            }
            if matches { position += count }
            return matches
        }

        /// A JSON integer without sign, fraction or exponent: `0` or up to 16 digits not
        /// beginning with 0 (larger ones are out of every range read here).
        mutating func integer() -> Int64? {
            skipSpaces()
            var value: Int64 = 0
            var digits = 0
            while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
                if digits == 1 && value == 0 { return nil }
                guard digits < 16 else { return nil }
                value = value * 10 + Int64(bytes[position] - UInt8(ascii: "0"))
                digits += 1
                position += 1
            }
            guard digits > 0 else { return nil }
            // `1.0`, `1e3` are numbers the full decoder judges.
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") || bytes[position] == UInt8(ascii: "e")
                || bytes[position] == UInt8(ascii: "E") { return nil }
            return value
        }

        mutating func permission() -> Permission? {
            if take(#""camera""#) { return .camera }
            if take(#""microphone""#) { return .microphone }
            if take(#""location""#) { return .location }
            return nil
        }
    }

    public static func decodeRequest(_ line: some Collection<UInt8>) throws(Rejection) -> RequestEnvelope {
        let (version, id, type, envelopeReader) = try envelope(line, ids: BrokerProtocol.requestIDs, speaker: "broker")
        var reader = envelopeReader
        do throws(ProtocolError) {
            let request = try requestBody(type, &reader)
            try reader.finish()
            return RequestEnvelope(id: id, request: request, version: version)
        } catch {
            throw Rejection(id: id, error: error, version: version)
        }
    }

    /// The request of `type` its members (after the envelope's) spell. Members a type
    /// does not know are refused by the caller's `finish`; a body whose later checks
    /// compare members finishes first, so an unknown member is what is reported.
    private static func requestBody(_ type: String, _ reader: inout ObjectReader) throws(ProtocolError) -> Request {
        switch type {
        case "hello":
            return .hello
        case "status":
            return .status(try statusQuery(&reader))
        case "request":
            return .request(try accessRequest(&reader))
        case "prompt-answer":
            return .promptAnswer(try ConversationCoding.decodeAnswer(&reader))
        case "pending":
            return .pending
        case "approve", "reject":
            return try pendingAction(type, &reader)
        case "run":
            return .run(try RunCoding.decodeOrder(&reader))
        case "run-signal":
            return .runSignal(RunSignal(signal: Int32(try reader.integer("signal", in: 1...64))))
        case "location":
            return .location(try LocationCoding.decode(&reader))
        case "subscribe":
            return .subscribe(try SubscriptionCoding.decodeQuery(&reader))
        case "open":
            return .open(try SubscriptionCoding.decodeOrder(&reader))
        default:
            guard let administration = try AdministrationCoding.decode(type, &reader) else {
                throw ProtocolError(.unknownType, context: "$.type",
                                    reason: "unknown request type '\(type)' in protocol version \(BrokerProtocol.version); "
                                        + "this broker knows: hello, status, request, prompt-answer, pending, "
                                        + "approve, reject, withdraw, decide, revoke, reset, list, reconcile, "
                                        + "audit-verify, audit-archive, audit-report, switch, switches, "
                                        + "run, run-signal, location, subscribe, open")
            }
            return administration
        }
    }

    private static func statusQuery(_ reader: inout ObjectReader) throws(ProtocolError) -> StatusQuery {
        let permissions = reader.optional("permissions")
        let user = try reader.optionalString("user", maxLength: 256)
        if let user, user.isEmpty {
            throw ProtocolError(.badMessage, context: reader.childPath("user"),
                                reason: "empty user name; leave the field out to mean yourself")
        }
        try reader.finish()
        let list = try permissions.map { (value) throws(ProtocolError) in
            try Strict.permissions(value, path: "$.permissions")
        }
        return StatusQuery(permissions: list, user: user)
    }

    private static func accessRequest(_ reader: inout ObjectReader) throws(ProtocolError) -> AccessRequest {
        let permissions = try reader.required("permissions")
        let reason = try reader.optionalString("reason", maxLength: 1024)
        // No scope: the policy's Keep= chooses.
        let scope = reader.has("scope") ? try ConversationCoding.scope(&reader) : nil
        if scope == nil && reader.has("duration") {
            throw ProtocolError(.badMessage, context: reader.childPath("duration"),
                                reason: "'duration' goes only with scope 'for'")
        }
        let wait = try reader.optional("wait").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: "$.wait")
        } ?? false
        let accuracy = try ConversationCoding.accuracy(&reader)
        try reader.finish()
        let list = try Strict.permissions(permissions, path: "$.permissions")
        if accuracy != nil && !list.contains(.location) {
            throw ProtocolError(.badMessage, context: "$.accuracy",
                                reason: "'accuracy' goes only with permission location, which is not asked for")
        }
        return AccessRequest(permissions: list, reason: reason, scope: scope, wait: wait, accuracy: accuracy)
    }

    /// `approve` may choose the term; `reject` records a denial only with `deny`.
    private static func pendingAction(_ type: String, _ reader: inout ObjectReader) throws(ProtocolError) -> Request {
        let pending = try reader.integer("pending", in: 1...BrokerProtocol.requestIDs.upperBound)
        var action = PendingAction(pending: pending, reason: try reader.optionalString("reason", maxLength: 1024))
        guard type == "reject" else {
            if reader.has("scope") { action.scope = try ConversationCoding.scope(&reader) }
            return .approve(action)
        }
        action.deny = try reader.optional("deny").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: "$.deny")
        } ?? false
        return .reject(action)
    }

    // MARK: Replies

    public static func encode(_ envelope: ReplyEnvelope) -> [UInt8] {
        var members = header(version: envelope.version, id: envelope.id, type: envelope.reply.type)
        switch envelope.reply {
        case .hello(let hello):
            members.append(JSONMember("server", .string(hello.server)))
            members.append(JSONMember("versions", .array(hello.versions.map { .integer($0) })))
            let peer = hello.peer
            var peerMembers = [
                JSONMember("uid", .integer(Int64(peer.uid))),
                JSONMember("gid", .integer(Int64(peer.gid))),
                JSONMember("pid", .integer(Int64(peer.pid))),
                JSONMember("groups", .array(peer.groups.map { .integer(Int64($0)) })),
            ]
            if let user = peer.user { peerMembers.append(JSONMember("user", .string(user))) }
            if let program = peer.program { peerMembers.append(JSONMember("program", .string(program))) }
            peerMembers.append(JSONMember("admin", .bool(peer.admin)))
            members.append(JSONMember("peer", .object(peerMembers)))
        case .status(let status):
            members += ModelCoding.statusMembers(user: status.user, uid: status.uid, permissions: status.permissions)
        case .error(let error):
            members.append(JSONMember("code", .string(error.code.rawValue)))
            members.append(JSONMember("context", .string(error.context)))
            members.append(JSONMember("reason", .string(error.reason)))
        case .prompt(let prompt):
            members += ConversationCoding.encode(prompt)
        case .queued(let queued):
            members += ConversationCoding.encode(queued)
        case .decision(let decision):
            members += ConversationCoding.encode(decision)
        case .pending(let list):
            members += ConversationCoding.encode(list)
        case .resolved(let resolved):
            members += ConversationCoding.encode(resolved)
        case .result(let result):
            members.append(JSONMember("operation", .string(result.operation)))
            members.append(JSONMember("document", result.document))
        case .runStarted(let started):
            members += RunCoding.encode(started)
        case .runEnded(let ended):
            members += RunCoding.encode(ended)
        case .update(let update):
            members += SubscriptionCoding.encode(update)
        case .opened(let opened):
            members += SubscriptionCoding.encode(opened)
        }
        return JSONWriter.bytes(.object(members))
    }

    /// Decodes a reply line with the same strictness the broker applies to requests.
    public static func decodeReply(_ line: some Collection<UInt8>) throws(ProtocolError) -> ReplyEnvelope {
        do {
            let (version, id, type, envelopeReader) = try envelope(line, ids: 0...BrokerProtocol.requestIDs.upperBound,
                                                                   speaker: "client")
            var reader = envelopeReader
            let reply: Reply
            switch type {
            case "hello":
                let server = try reader.string("server", maxLength: 256)
                let versions = try reader.array("versions", maxCount: 64) { (value, path) throws(ProtocolError) in
                    try Strict.integer(value, path: path, in: 1...Int64(Int32.max))
                }
                let peer = try reader.object("peer") { (peer) throws(ProtocolError) -> PeerInfo in
                    PeerInfo(uid: try peer.uint32("uid"), gid: try peer.uint32("gid"), pid: try peer.int32("pid"),
                             groups: try peer.array("groups", maxCount: 65536, Strict.uint32),
                             user: try peer.optionalString("user", maxLength: 256),
                             program: try peer.optionalString("program"), admin: try peer.bool("admin"))
                }
                reply = .hello(HelloReply(server: server, versions: versions, peer: peer))
            case "status":
                let (user, uid, permissions) = try ModelCoding.decodeStatusMembers(&reader)
                reply = .status(StatusReply(user: user, uid: uid, permissions: permissions))
            case "error":
                let code = try reader.string("code", maxLength: 64)
                let context = try reader.string("context", maxLength: 4096)
                let reason = try reader.string("reason", maxLength: 16384)
                reply = .error(ProtocolError(ErrorCode(rawValue: code), context: context, reason: reason))
            case "prompt":
                reply = .prompt(try ConversationCoding.decodePrompt(&reader))
            case "queued":
                reply = .queued(try ConversationCoding.decodeQueued(&reader))
            case "decision":
                reply = .decision(try ConversationCoding.decodeDecision(&reader))
            case "pending":
                reply = .pending(try ConversationCoding.decodePendingList(&reader))
            case "resolved":
                reply = .resolved(try ConversationCoding.decodeResolved(&reader))
            case "result":
                let operation = try reader.string("operation", maxLength: 64)
                let document = try reader.required("document")
                guard case .object = document else {
                    throw ProtocolError(.badMessage, context: reader.childPath("document"),
                                        reason: "a result document is a JSON object, not \(document.kindDescription)")
                }
                reply = .result(OperationResult(operation: operation, document: document))
            case "run-started":
                reply = .runStarted(try RunCoding.decodeStarted(&reader))
            case "run-ended":
                reply = .runEnded(try RunCoding.decodeEnded(&reader))
            case "update":
                reply = .update(try SubscriptionCoding.decodeUpdate(&reader))
            case "opened":
                reply = .opened(try SubscriptionCoding.decodeOpened(&reader))
            default:
                throw ProtocolError(.unknownType, context: "$.type",
                                    reason: "unknown reply type '\(type)' in protocol version \(version)")
            }
            try reader.finish()
            return ReplyEnvelope(id: id, reply: reply, version: version)
        } catch let rejection as Rejection {
            throw rejection.error
        } catch let error as ProtocolError {
            throw error
        } catch {
            throw ProtocolError(.internal, context: "reply", reason: "\(error)")
        }
    }

    // MARK: The envelope, for both directions

    private static func header(version: Int64, id: Int64, type: String) -> [JSONMember] {
        [JSONMember("version", .integer(version)), JSONMember("id", .integer(id)), JSONMember("type", .string(type))]
    }

    /// Parses the line and reads `version`, `id` and `type`. The version is checked
    /// first: a message of another version may have another shape altogether.
    private static func envelope(_ line: some Collection<UInt8>, ids: ClosedRange<Int64>,
                                 speaker: String) throws(Rejection) -> (Int64, Int64, String, ObjectReader) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(line)
        } catch {
            throw Rejection(id: 0, error: ProtocolError(.badJSON, context: "byte \(error.offset)", reason: error.problem))
        }
        guard case .object(let members) = value else {
            throw Rejection(id: 0, error: ProtocolError(.badJSON, context: "$",
                                                        reason: "a message is a JSON object, not \(value.kindDescription)"))
        }
        // The id, when readable, goes into any error reply so the client can match it.
        var knownID: Int64 = 0
        if let member = members.first(where: { $0.key == "id" }), case .integer(let id) = member.value, ids.contains(id) {
            knownID = id
        }
        // So is the version, when it is one this side speaks: the peer can read the answer.
        var knownVersion = BrokerProtocol.version
        if let member = members.first(where: { $0.key == "version" }), case .integer(let version) = member.value,
           BrokerProtocol.supportedVersions.contains(version) {
            knownVersion = version
        }
        do throws(ProtocolError) {
            var reader = try ObjectReader(value, path: "$")
            let version = try reader.integer("version", in: Int64.min...Int64.max)
            guard BrokerProtocol.supportedVersions.contains(version) else {
                throw ProtocolError(.unsupportedVersion, context: "$.version",
                                    reason: "protocol version \(version) is not supported; this \(speaker) speaks "
                                        + (BrokerProtocol.supportedVersions.count == 1 ? "version " : "versions ")
                                        + BrokerProtocol.supportedVersions.map(String.init).joined(separator: ", "))
            }
            let id = try reader.integer("id", in: ids)
            let type = try reader.string("type", maxLength: 64)
            return (version, id, type, reader)
        } catch {
            throw Rejection(id: knownID, error: error, version: knownVersion)
        }
    }
}
