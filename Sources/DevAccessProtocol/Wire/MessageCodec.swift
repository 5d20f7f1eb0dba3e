import DevAccessCore

/// Turns envelopes into lines and lines into envelopes, by the rules in
/// StrictReader.swift. Lines are returned and taken without their newline.
public enum MessageCodec {
    /// A request that could not be decoded: the error to send back, and the request's
    /// id when it could be read (0 otherwise).
    public struct Rejection: Error, Sendable, Hashable {
        public var id: Int64
        public var error: ProtocolError

        public init(id: Int64, error: ProtocolError) {
            self.id = id
            self.error = error
        }
    }

    // MARK: Requests

    public static func encode(_ envelope: RequestEnvelope) -> [UInt8] {
        var members = header(version: BrokerProtocol.version, id: envelope.id, type: envelope.request.type)
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
            switch request.scope {
            case .once: members.append(JSONMember("scope", .string("once")))
            case .always: members.append(JSONMember("scope", .string("always")))
            case .duration(let seconds):
                members.append(JSONMember("scope", .string("for")))
                members.append(JSONMember("duration", .integer(seconds)))
            }
        }
        return JSONWriter.bytes(.object(members))
    }

    public static func decodeRequest(_ line: some Collection<UInt8>) throws(Rejection) -> RequestEnvelope {
        let (id, type, envelopeReader) = try envelope(line, ids: BrokerProtocol.requestIDs, speaker: "broker")
        var reader = envelopeReader
        do throws(ProtocolError) {
            let request: Request
            switch type {
            case "hello":
                try reader.finish()
                request = .hello
            case "status":
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
                request = .status(StatusQuery(permissions: list, user: user))
            case "request":
                let permissions = try reader.required("permissions")
                let reason = try reader.optionalString("reason", maxLength: 1024)
                let scopeWord = try reader.word("scope", [("once", 0), ("for", 1), ("always", 2)])
                let scope: RequestScope
                if scopeWord == 1 {
                    scope = .duration(seconds: try reader.integer("duration", in: 1...RequestScope.maxDurationSeconds))
                } else {
                    if reader.has("duration") {
                        throw ProtocolError(.badMessage, context: reader.childPath("duration"),
                                            reason: "'duration' goes only with scope 'for'")
                    }
                    scope = scopeWord == 0 ? .once : .always
                }
                try reader.finish()
                request = .request(AccessRequest(permissions: try Strict.permissions(permissions, path: "$.permissions"),
                                                 reason: reason, scope: scope))
            default:
                throw ProtocolError(.unknownType, context: "$.type",
                                    reason: "unknown request type '\(type)'; this broker knows: hello, status, request")
            }
            return RequestEnvelope(id: id, request: request)
        } catch {
            throw Rejection(id: id, error: error)
        }
    }

    // MARK: Replies

    public static func encode(_ envelope: ReplyEnvelope) -> [UInt8] {
        var members = header(version: BrokerProtocol.version, id: envelope.id, type: envelope.reply.type)
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
            members.append(JSONMember("user", .string(status.user)))
            members.append(JSONMember("uid", .integer(Int64(status.uid))))
            members.append(JSONMember("permissions", .array(status.permissions.map(ModelCoding.encode))))
        case .error(let error):
            members.append(JSONMember("code", .string(error.code.rawValue)))
            members.append(JSONMember("context", .string(error.context)))
            members.append(JSONMember("reason", .string(error.reason)))
        }
        return JSONWriter.bytes(.object(members))
    }

    /// Decodes a reply line with the same strictness the broker applies to requests.
    public static func decodeReply(_ line: some Collection<UInt8>) throws(ProtocolError) -> ReplyEnvelope {
        do {
            let (id, type, envelopeReader) = try envelope(line, ids: 0...BrokerProtocol.requestIDs.upperBound, speaker: "client")
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
                let user = try reader.string("user", maxLength: 256)
                let uid = try reader.uint32("uid")
                let permissions = try reader.array("permissions", maxCount: 64, ModelCoding.decodePermissionStatus)
                reply = .status(StatusReply(user: user, uid: uid, permissions: permissions))
            case "error":
                let code = try reader.string("code", maxLength: 64)
                let context = try reader.string("context", maxLength: 4096)
                let reason = try reader.string("reason", maxLength: 16384)
                reply = .error(ProtocolError(ErrorCode(rawValue: code), context: context, reason: reason))
            default:
                throw ProtocolError(.unknownType, context: "$.type", reason: "unknown reply type '\(type)'")
            }
            try reader.finish()
            return ReplyEnvelope(id: id, reply: reply)
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
                                 speaker: String) throws(Rejection) -> (Int64, String, ObjectReader) {
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
        do throws(ProtocolError) {
            var reader = try ObjectReader(value, path: "$")
            let version = try reader.integer("version", in: Int64.min...Int64.max)
            guard BrokerProtocol.supportedVersions.contains(version) else {
                throw ProtocolError(.unsupportedVersion, context: "$.version",
                                    reason: "protocol version \(version) is not supported; this \(speaker) speaks version "
                                        + BrokerProtocol.supportedVersions.map(String.init).joined(separator: ", "))
            }
            let id = try reader.integer("id", in: ids)
            let type = try reader.string("type", maxLength: 64)
            return (id, type, reader)
        } catch {
            throw Rejection(id: knownID, error: error)
        }
    }
}
