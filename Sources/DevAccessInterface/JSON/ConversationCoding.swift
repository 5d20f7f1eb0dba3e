import DevAccessCore

/// The conversation's results as JSON: the wire's `decision` and `resolved` bodies, and
/// `devaccess request|approve|reject --json` (docs/json.md). The rest of the
/// conversation's encoding and its strict decoding: DevAccessProtocol (Wire/ConversationCoding.swift).
public enum ConversationCoding {
    public static func encode(_ result: RequestResult) -> JSONValue {
        var members = [JSONMember("permission", .string(result.permission.rawValue)),
                       JSONMember("outcome", .string(result.outcome.rawValue))]
        if let how = result.how { members.append(JSONMember("how", .string(how.rawValue))) }
        if let grant = result.grant { members.append(JSONMember("grant", .integer(grant))) }
        if let term = result.term { members.append(JSONMember("term", .string(term.rawValue))) }
        if let expires = result.expires { members.append(JSONMember("expires", .string(expires))) }
        if let pending = result.pending { members.append(JSONMember("pending", .integer(pending))) }
        if let why = result.why { members.append(JSONMember("why", .string(why.rawValue))) }
        if let accuracy = result.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
        members.append(JSONMember("message", .string(result.message)))
        return .object(members)
    }

    /// The wire's `decision` reply after its envelope; also `devaccess request --json`.
    public static func encode(_ decision: DecisionReply) -> [JSONMember] {
        [JSONMember("user", .string(decision.user)), JSONMember("uid", .integer(Int64(decision.uid))),
         JSONMember("results", .array(decision.results.map(encode))),
         JSONMember("permissions", .array(decision.permissions.map(ModelCoding.encode)))]
    }

    public static func encode(_ resolved: ResolvedReply) -> [JSONMember] {
        [JSONMember("pending", .integer(resolved.pending)),
         JSONMember("resolution", .string(resolved.resolution.rawValue)),
         JSONMember("user", .string(resolved.user)), JSONMember("uid", .integer(Int64(resolved.uid))),
         JSONMember("results", .array(resolved.results.map(encode)))]
    }
}
