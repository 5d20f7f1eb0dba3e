import DevAccessCore
import DevAccessInterface

/// Encoding and strict decoding of the conversation's bodies (DevAccessInterface,
/// Values/Conversation.swift), by the rules in StrictReader.swift; the documents `--json`
/// prints too are encoded in DevAccessInterface (JSON/ConversationCoding.swift). Each
/// `decode` reads the fields of the envelope's reader; the caller finishes it (unknown
/// fields refused).
extension ConversationCoding {
    static let maxPromptNumber: Int64 = 1_000_000
    static let maxTimeout: Int64 = 86_400
    static let maxAttempts: Int64 = 10

    private static func words<E: RawRepresentable & CaseIterable>(_ type: E.Type) -> [(String, E)] where E.RawValue == String {
        E.allCases.map { ($0.rawValue, $0) }
    }

    private static let choiceWords = ConsentChoice.allCases.map { ($0.word, $0) }

    // MARK: request scope

    /// `scope` and, with `for`, `duration`.
    static func scope(_ reader: inout ObjectReader) throws(ProtocolError) -> GrantTerm {
        let word = try reader.word("scope", words(GrantTerm.Word.self))
        if word == .duration {
            return .duration(seconds: try reader.integer("duration", in: 1...GrantTerm.maxDurationSeconds))
        }
        if reader.has("duration") {
            throw ProtocolError(.badMessage, context: reader.childPath("duration"),
                                reason: "'duration' goes only with scope 'for'")
        }
        return word == .once ? .once : .always
    }

    /// `scope` (and `duration` for `for`); nothing for nil.
    static func encode(scope: GrantTerm?) -> [JSONMember] {
        encode(scope, field: "scope")
    }

    /// `field` with the term's word, and `duration` for `for`; nothing for nil.
    static func encode(_ term: GrantTerm?, field: String) -> [JSONMember] {
        guard let term else { return [] }
        return [JSONMember(field, .string(term.word.rawValue))] + (term.seconds.map { [JSONMember("duration", .integer($0))] } ?? [])
    }

    /// An optional `accuracy`: a location level; anything else is refused naming the field.
    static func accuracy(_ reader: inout ObjectReader) throws(ProtocolError) -> LocationAccuracy? {
        try reader.optional("accuracy").map { (value) throws(ProtocolError) in
            try Strict.word(value, path: reader.childPath("accuracy"),
                            LocationAccuracy.allCases.reversed().map { ($0.rawValue, $0) })
        }
    }

    // MARK: prompt-answer

    static func encode(_ answer: PromptAnswer) -> [JSONMember] {
        var members = [JSONMember("prompt", .integer(answer.prompt))]
        switch answer.answer {
        case .choice(let choice):
            members.append(JSONMember("answer", .string(choice.word)))
        case .password(let password):
            members.append(JSONMember("answer", .string("password")))
            members.append(JSONMember("password", .string(password)))
        case .cancel(let why):
            members.append(JSONMember("answer", .string("cancel")))
            members.append(JSONMember("why", .string(why.rawValue)))
        }
        return members
    }

    static func decodeAnswer(_ reader: inout ObjectReader) throws(ProtocolError) -> PromptAnswer {
        let prompt = try reader.integer("prompt", in: 1...maxPromptNumber)
        enum Word { case choice(ConsentChoice), password, cancel }
        let word = try reader.word("answer", choiceWords.map { ($0.0, Word.choice($0.1)) }
                                       + [("password", .password), ("cancel", .cancel)])
        let answer: PromptAnswer.Answer
        switch word {
        case .choice(let choice):
            answer = .choice(choice)
        case .password:
            // The length is checked, never the content: a password is never echoed in an error.
            answer = .password(try reader.string("password", maxLength: 1024))
        case .cancel:
            answer = .cancel(try reader.optional("why").map { (value) throws(ProtocolError) in
                try Strict.word(value, path: reader.childPath("why"), words(CancelReason.self))
            } ?? .dismissed)
        }
        if case .password = word {} else if reader.has("password") {
            throw ProtocolError(.badMessage, context: reader.childPath("password"),
                                reason: "'password' goes only with answer 'password'")
        }
        if case .cancel = word {} else if reader.has("why") {
            throw ProtocolError(.badMessage, context: reader.childPath("why"), reason: "'why' goes only with answer 'cancel'")
        }
        return PromptAnswer(prompt: prompt, answer: answer)
    }

    // MARK: prompt

    static func encode(_ prompt: PromptMessage) -> [JSONMember] {
        var members = [
            JSONMember("prompt", .integer(prompt.prompt)),
            JSONMember("kind", .string(prompt.kind.rawValue)),
            JSONMember("permissions", .array(prompt.permissions.map { .string($0.rawValue) })),
            JSONMember("user", .string(prompt.user)),
        ]
        if let program = prompt.program { members.append(JSONMember("program", .string(program))) }
        if let reason = prompt.reason { members.append(JSONMember("reason", .string(reason))) }
        members.append(JSONMember("devices", .array(prompt.devices.map { device in
            .object([JSONMember("permission", .string(device.permission.rawValue)),
                     JSONMember("id", .string(device.id)), JSONMember("name", .string(device.name))])
        })))
        members.append(JSONMember("text", .string(prompt.text)))
        members.append(JSONMember("choices", .array(prompt.choices.map { choice in
            var fields = [JSONMember("choice", .string(choice.choice.word))]
            if let duration = choice.duration { fields.append(JSONMember("duration", .integer(duration))) }
            fields.append(JSONMember("label", .string(choice.label)))
            return .object(fields)
        })))
        members.append(JSONMember("timeout", .integer(prompt.timeout)))
        if let attempt = prompt.attempt { members.append(JSONMember("attempt", .integer(attempt))) }
        if let attempts = prompt.attempts { members.append(JSONMember("attempts", .integer(attempts))) }
        return members
    }

    static func decodePrompt(_ reader: inout ObjectReader) throws(ProtocolError) -> PromptMessage {
        let number = try reader.integer("prompt", in: 1...maxPromptNumber)
        let kind = try reader.word("kind", words(PromptKind.self))
        let permissions = try Strict.permissions(try reader.required("permissions"), path: reader.childPath("permissions"))
        let user = try reader.string("user", maxLength: 256)
        let program = try reader.optionalString("program")
        let reason = try reader.optionalString("reason", maxLength: 1024)
        let devices = try reader.array("devices", maxCount: 256) { (value, path) throws(ProtocolError) in
            try Strict.object(value, path: path) { (device) throws(ProtocolError) -> PromptDevice in
                PromptDevice(permission: try Strict.permission(try device.required("permission"),
                                                               path: device.childPath("permission")),
                             id: try device.string("id"), name: try device.string("name"))
            }
        }
        let text = try reader.string("text", maxLength: 8192)
        let choices = try reader.array("choices", maxCount: 8) { (value, path) throws(ProtocolError) in
            try Strict.object(value, path: path) { (choice) throws(ProtocolError) -> PromptChoice in
                let word = try choice.word("choice", choiceWords)
                var duration: Int64?
                if word == .allow(.duration) {
                    duration = try choice.integer("duration", in: 1...GrantTerm.maxDurationSeconds)
                } else if choice.has("duration") {
                    throw ProtocolError(.badMessage, context: choice.childPath("duration"),
                                        reason: "'duration' goes only with choice 'for'")
                }
                return PromptChoice(choice: word, duration: duration, label: try choice.string("label", maxLength: 256))
            }
        }
        var seen: Set<ConsentChoice> = []
        for (position, choice) in choices.enumerated() where !seen.insert(choice.choice).inserted {
            throw ProtocolError(.badMessage, context: "$.choices[\(position)]", reason: "'\(choice.choice.word)' is offered twice")
        }
        let timeout = try reader.integer("timeout", in: 1...maxTimeout)
        let attempt = try reader.optionalInteger("attempt", in: 1...maxAttempts)
        let attempts = try reader.optionalInteger("attempts", in: 1...maxAttempts)
        switch kind {
        case .ask:
            guard !choices.isEmpty else {
                throw ProtocolError(.badMessage, context: reader.childPath("choices"), reason: "an 'ask' prompt offers choices")
            }
            guard attempt == nil, attempts == nil else {
                throw ProtocolError(.badMessage, context: reader.childPath("attempt"),
                                    reason: "'attempt' and 'attempts' go only with kind 'password'")
            }
        case .password:
            guard choices.isEmpty else {
                throw ProtocolError(.badMessage, context: reader.childPath("choices"),
                                    reason: "a 'password' prompt offers no choices")
            }
            guard let attempt, let attempts, attempt <= attempts else {
                throw ProtocolError(.badMessage, context: reader.childPath("attempt"),
                                    reason: "a 'password' prompt has 'attempt' <= 'attempts'")
            }
        }
        return PromptMessage(prompt: number, kind: kind, permissions: permissions, user: user, program: program,
                             reason: reason, devices: devices, text: text, choices: choices, timeout: timeout,
                             attempt: attempt, attempts: attempts)
    }

    // MARK: queued

    static func encode(_ queued: QueuedReply) -> [JSONMember] {
        [JSONMember("pending", .integer(queued.pending)),
         JSONMember("permissions", .array(queued.permissions.map { .string($0.rawValue) })),
         JSONMember("new", .bool(queued.new)), JSONMember("waiting", .bool(queued.waiting))]
    }

    static func decodeQueued(_ reader: inout ObjectReader) throws(ProtocolError) -> QueuedReply {
        QueuedReply(pending: try reader.integer("pending", in: BrokerProtocol.requestIDs),
                    permissions: try Strict.permissions(try reader.required("permissions"),
                                                        path: reader.childPath("permissions")),
                    new: try reader.bool("new"), waiting: try reader.bool("waiting"))
    }

    // MARK: results, decision, resolved

    static func decodeResult(_ value: JSONValue, path: String) throws(ProtocolError) -> RequestResult {
        try Strict.object(value, path: path) { (reader) throws(ProtocolError) -> RequestResult in
            let permission = try Strict.permission(try reader.required("permission"), path: reader.childPath("permission"))
            let outcome = try reader.word("outcome", words(RequestOutcome.self))
            let how = try reader.optional("how").map { (value) throws(ProtocolError) in
                try Strict.word(value, path: reader.childPath("how"), words(DecisionMethod.self))
            }
            let grant = try reader.optionalInteger("grant", in: 1...BrokerProtocol.requestIDs.upperBound)
            let term = try reader.optional("term").map { (value) throws(ProtocolError) in
                try Strict.word(value, path: reader.childPath("term"), words(GrantTerm.Word.self))
            }
            let expires = try reader.optionalString("expires", maxLength: 64)
            let pending = try reader.optionalInteger("pending", in: BrokerProtocol.requestIDs)
            let why = try reader.optional("why").map { (value) throws(ProtocolError) in
                try Strict.word(value, path: reader.childPath("why"), words(UndecidedReason.self))
            }
            if (why != nil) != (outcome == .undecided) {
                throw ProtocolError(.badMessage, context: reader.childPath("why"),
                                    reason: "'why' is present exactly when the outcome is 'undecided'")
            }
            if (pending != nil) != (outcome == .pending) {
                throw ProtocolError(.badMessage, context: reader.childPath("pending"),
                                    reason: "'pending' is present exactly when the outcome is 'pending'")
            }
            let accuracy = try accuracy(&reader)
            if accuracy != nil && permission != .location {
                throw ProtocolError(.badMessage, context: reader.childPath("accuracy"),
                                    reason: "'accuracy' goes only with permission location")
            }
            return RequestResult(permission: permission, outcome: outcome, how: how, grant: grant, term: term,
                                 expires: expires, pending: pending, why: why, accuracy: accuracy,
                                 message: try reader.string("message", maxLength: 4096))
        }
    }

    static func decodeDecision(_ reader: inout ObjectReader) throws(ProtocolError) -> DecisionReply {
        DecisionReply(user: try reader.string("user", maxLength: 256), uid: try reader.uint32("uid"),
                      results: try reader.array("results", maxCount: 64, decodeResult),
                      permissions: try reader.array("permissions", maxCount: 64, ModelCoding.decodePermissionStatus))
    }

    static func decodeResolved(_ reader: inout ObjectReader) throws(ProtocolError) -> ResolvedReply {
        ResolvedReply(pending: try reader.integer("pending", in: BrokerProtocol.requestIDs),
                      resolution: try reader.word("resolution", words(Resolution.self)),
                      user: try reader.string("user", maxLength: 256), uid: try reader.uint32("uid"),
                      results: try reader.array("results", maxCount: 64, decodeResult))
    }

    // MARK: pending

    static func encode(_ list: PendingListReply) -> [JSONMember] {
        [JSONMember("requests", .array(list.requests.map { item in
            var members = [JSONMember("pending", .integer(item.pending)), JSONMember("user", .string(item.user)),
                           JSONMember("uid", .integer(Int64(item.uid)))]
            if let program = item.program { members.append(JSONMember("program", .string(program))) }
            members.append(JSONMember("permissions", .array(item.permissions.map { .string($0.rawValue) })))
            if let reason = item.reason { members.append(JSONMember("reason", .string(reason))) }
            members += encode(item.term, field: "term")
            if let accuracy = item.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
            members.append(JSONMember("created", .string(item.created)))
            return .object(members)
        }))]
    }

    static func decodePendingList(_ reader: inout ObjectReader) throws(ProtocolError) -> PendingListReply {
        PendingListReply(requests: try reader.array("requests", maxCount: 4096) { (value, path) throws(ProtocolError) in
            try Strict.object(value, path: path) { (item) throws(ProtocolError) -> PendingItem in
                let pending = try item.integer("pending", in: BrokerProtocol.requestIDs)
                let user = try item.string("user", maxLength: 256)
                let uid = try item.uint32("uid")
                let program = try item.optionalString("program")
                let permissions = try Strict.permissions(try item.required("permissions"),
                                                         path: item.childPath("permissions"))
                let reason = try item.optionalString("reason", maxLength: 1024)
                let word = try item.optional("term").map { (value) throws(ProtocolError) in
                    try Strict.word(value, path: item.childPath("term"), words(GrantTerm.Word.self))
                }
                let duration = try item.optionalInteger("duration", in: 1...GrantTerm.maxDurationSeconds)
                let term = word.flatMap { GrantTerm(word: $0, seconds: duration) }
                if term == nil && (word != nil || duration != nil) {
                    throw ProtocolError(.badMessage, context: item.childPath("duration"),
                                        reason: "'duration' is present exactly when the term is 'for'")
                }
                let accuracy = try accuracy(&item)
                return PendingItem(pending: pending, user: user, uid: uid, program: program, permissions: permissions,
                                   reason: reason, term: term, accuracy: accuracy,
                                   created: try item.string("created", maxLength: 64))
            }
        })
    }
}
