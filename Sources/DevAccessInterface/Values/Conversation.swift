import DevAccessCore

// The request conversation and the approval queue (docs/protocol.md).
//
//   client                         broker
//   request  ───────────────────▶
//            ◀─────────────────── prompt        (ask or password; zero or more)
//   prompt-answer ──────────────▶
//            ◀─────────────────── queued        (auth_admin; informational)
//            ◀─────────────────── decision      (always last)

/// What a prompt asks the requesting user for.
public enum PromptKind: String, Sendable, Hashable, CaseIterable {
    /// Allow (once, for a time, always) or deny.
    case ask
    /// Their own password, to prove presence (policy auth_self).
    case password
}

/// An answer to an `ask` prompt: allow for a term, or deny. Written as the term's word
/// (`once`, `for`, `always`) or `deny`.
public enum ConsentChoice: Sendable, Hashable, CaseIterable {
    case allow(GrantTerm.Word)
    case deny

    public static let allCases: [ConsentChoice] = GrantTerm.Word.allCases.map(ConsentChoice.allow) + [.deny]

    /// The protocol's word: the term's, or `deny`.
    public var word: String {
        switch self {
        case .allow(let term): return term.rawValue
        case .deny: return "deny"
        }
    }
}

/// One answer offered by an `ask` prompt.
public struct PromptChoice: Sendable, Hashable {
    public var choice: ConsentChoice
    /// Seconds, with `for` only.
    public var duration: Int64?
    /// For people: "Allow for 1h".
    public var label: String

    public init(choice: ConsentChoice, duration: Int64? = nil, label: String) {
        self.choice = choice
        self.duration = duration
        self.label = label
    }

    /// Allow for `term` (a `for` offers its seconds), with `label`.
    public init(allow term: GrantTerm, label: String) {
        self.init(choice: .allow(term.word), duration: term.seconds, label: label)
    }

    /// The term an allow offers; nil for deny (and for a `for` without its seconds).
    public var term: GrantTerm? {
        guard case .allow(let word) = choice else { return nil }
        return GrantTerm(word: word, seconds: duration)
    }
}

/// A device a prompt is about.
public struct PromptDevice: Sendable, Hashable {
    public var permission: Permission
    public var id: String
    public var name: String

    public init(permission: Permission, id: String, name: String) {
        self.permission = permission
        self.id = id
        self.name = name
    }
}

/// `prompt`: a question for the requesting user. The client shows it on the user's own
/// terminal and answers with `prompt-answer`; no answer within `timeout` seconds, a
/// `cancel`, or the end of the connection records no decision.
public struct PromptMessage: Sendable, Hashable {
    /// Numbers the prompts of one request from 1; the answer names it.
    public var prompt: Int64
    public var kind: PromptKind
    public var permissions: [Permission]
    /// The requesting user, as the kernel identified the peer.
    public var user: String
    /// The requesting program (/proc/PID/exe of the peer), when known.
    public var program: String?
    /// The requester's rationale.
    public var reason: String?
    public var devices: [PromptDevice]
    /// The whole question as one text for people (what, which devices, which program, why).
    public var text: String
    /// `ask`: the answers offered, in this order. `password`: empty.
    public var choices: [PromptChoice]
    /// Seconds the broker waits for the answer.
    public var timeout: Int64
    /// `password`: this attempt (from 1) of `attempts`.
    public var attempt: Int64?
    public var attempts: Int64?

    public init(prompt: Int64, kind: PromptKind, permissions: [Permission], user: String, program: String?,
                reason: String?, devices: [PromptDevice], text: String, choices: [PromptChoice], timeout: Int64,
                attempt: Int64? = nil, attempts: Int64? = nil) {
        self.prompt = prompt
        self.kind = kind
        self.permissions = permissions
        self.user = user
        self.program = program
        self.reason = reason
        self.devices = devices
        self.text = text
        self.choices = choices
        self.timeout = timeout
        self.attempt = attempt
        self.attempts = attempts
    }
}

/// Why a client ended a prompt without an answer (recorded in the audit trail).
public enum CancelReason: String, Sendable, Hashable, CaseIterable {
    /// The user declined to answer.
    case dismissed
    /// Ctrl-C or another signal.
    case interrupted
    /// End of input on the terminal (Ctrl-D).
    case endOfInput = "end-of-input"
    /// The client has no terminal to ask on.
    case noTerminal = "no-terminal"
}

/// `prompt-answer`: the client's answer to prompt number `prompt` of the request with
/// the same id.
public struct PromptAnswer: Sendable, Hashable {
    public enum Answer: Sendable, Hashable {
        /// One of the prompt's choices (`ask`).
        case choice(ConsentChoice)
        /// The user's password (`password`); at most 1024 bytes, never logged.
        case password(String)
        /// No answer: nothing is recorded as the user's decision.
        case cancel(CancelReason)
    }

    public var prompt: Int64
    public var answer: Answer

    public init(prompt: Int64, answer: Answer) {
        self.prompt = prompt
        self.answer = answer
    }
}

/// `queued`: the permissions of a request that wait for an administrator.
public struct QueuedReply: Sendable, Hashable {
    /// The pending request's number (for `devaccess approve ID`).
    public var pending: Int64
    public var permissions: [Permission]
    /// false: an earlier request of this user already waited for these.
    public var new: Bool
    /// true: the broker keeps the request open and answers when an administrator decides.
    public var waiting: Bool

    public init(pending: Int64, permissions: [Permission], new: Bool, waiting: Bool) {
        self.pending = pending
        self.permissions = permissions
        self.new = new
        self.waiting = waiting
    }
}

/// What became of one permission of a request.
public enum RequestOutcome: String, Sendable, Hashable, CaseIterable {
    /// Allowed by this request (see `how`).
    case granted
    /// Denied by this request: the user said no, or an administrator rejected it.
    case denied
    /// Nothing to ask: the user can use every device already, or an earlier decision allows it.
    case alreadyAllowed = "already-allowed"
    /// An earlier denial stands; it is not asked again (`devaccess reset` forgets it).
    case alreadyDenied = "already-denied"
    /// Policy forbids it; no request can change that.
    case restricted
    /// No device serves it; nothing was asked or recorded.
    case unavailable
    /// No decision was made (see `why`); nothing was recorded, the next request asks again.
    case undecided
    /// Waiting for an administrator (see `pending`).
    case pending
}

/// Why a request ended without a decision.
public enum UndecidedReason: String, Sendable, Hashable, CaseIterable {
    case dismissed
    case interrupted
    case endOfInput = "end-of-input"
    case noTerminal = "no-terminal"
    /// Nobody answered the prompt in time.
    case timeout
    /// The client went away before answering.
    case disconnected
    /// The password was wrong every time.
    case wrongPassword = "wrong-password"
    /// PAM could not check the password (a broken configuration, not a wrong password).
    case authenticationFailed = "authentication-failed"
    /// The broker is shutting down.
    case shutdown

    public init(_ cancel: CancelReason) {
        switch cancel {
        case .dismissed: self = .dismissed
        case .interrupted: self = .interrupted
        case .endOfInput: self = .endOfInput
        case .noTerminal: self = .noTerminal
        }
    }
}

public struct RequestResult: Sendable, Hashable {
    public var permission: Permission
    public var outcome: RequestOutcome
    /// granted, denied, already-*: how the deciding grant was made.
    public var how: DecisionMethod?
    /// The ledger's grant id of the deciding grant.
    public var grant: Int64?
    public var term: GrantTerm.Word?
    /// When the grant ends, ISO 8601 UTC.
    public var expires: String?
    /// pending: the pending request's number.
    public var pending: Int64?
    /// undecided: why.
    public var why: UndecidedReason?
    /// Location: the level of the deciding grant (granted, already-allowed).
    public var accuracy: LocationAccuracy?
    /// One sentence for people.
    public var message: String

    public init(permission: Permission, outcome: RequestOutcome, how: DecisionMethod? = nil, grant: Int64? = nil,
                term: GrantTerm.Word? = nil, expires: String? = nil, pending: Int64? = nil, why: UndecidedReason? = nil,
                accuracy: LocationAccuracy? = nil, message: String) {
        self.accuracy = accuracy
        self.permission = permission
        self.outcome = outcome
        self.how = how
        self.grant = grant
        self.term = term
        self.expires = expires
        self.pending = pending
        self.why = why
        self.message = message
    }
}

/// `decision`: the final answer to a request: per permission what happened, and the
/// statuses as they are afterwards (ACLs changed, ledger written).
public struct DecisionReply: Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var results: [RequestResult]
    public var permissions: [PermissionStatus]

    public init(user: String, uid: UInt32, results: [RequestResult], permissions: [PermissionStatus]) {
        self.user = user
        self.uid = uid
        self.results = results
        self.permissions = permissions
    }
}

/// `approve` / `reject` / `withdraw`: which pending request, and an optional note for the
/// audit trail.
public struct PendingAction: Sendable, Hashable {
    public var pending: Int64
    public var reason: String?
    /// `approve`: the term the administrator chose; nil: what the request asked
    /// for. Either way capped by the policy's MaxDuration=.
    public var scope: GrantTerm?
    /// `reject`: record a denial (sticky until `reset`); false: decline this request only,
    /// recording no decision.
    public var deny: Bool

    public init(pending: Int64, reason: String? = nil, scope: GrantTerm? = nil, deny: Bool = false) {
        self.pending = pending
        self.reason = reason
        self.scope = scope
        self.deny = deny
    }
}

/// One request waiting for an administrator.
public struct PendingItem: Sendable, Hashable {
    public var pending: Int64
    public var user: String
    public var uid: UInt32
    public var program: String?
    public var permissions: [Permission]
    public var reason: String?
    /// As requested; nil: the policy's Keep=, else once.
    public var term: GrantTerm?
    /// The location accuracy asked for (with location only).
    public var accuracy: LocationAccuracy?
    /// ISO 8601 UTC.
    public var created: String

    public init(pending: Int64, user: String, uid: UInt32, program: String?, permissions: [Permission],
                reason: String?, term: GrantTerm?, accuracy: LocationAccuracy? = nil,
                created: String) {
        self.accuracy = accuracy
        self.pending = pending
        self.user = user
        self.uid = uid
        self.program = program
        self.permissions = permissions
        self.reason = reason
        self.term = term
        self.created = created
    }
}

public struct PendingListReply: Sendable, Hashable {
    public var requests: [PendingItem]

    public init(requests: [PendingItem]) {
        self.requests = requests
    }
}

public enum Resolution: String, Sendable, Hashable, CaseIterable {
    case approved
    /// A denial was recorded.
    case rejected
    /// No decision recorded; the requester is told, and may ask again.
    case declined
}

/// `resolved`: what an approval or rejection did.
public struct ResolvedReply: Sendable, Hashable {
    public var pending: Int64
    public var resolution: Resolution
    public var user: String
    public var uid: UInt32
    public var results: [RequestResult]

    public init(pending: Int64, resolution: Resolution, user: String, uid: UInt32, results: [RequestResult]) {
        self.pending = pending
        self.resolution = resolution
        self.user = user
        self.uid = uid
        self.results = results
    }
}
