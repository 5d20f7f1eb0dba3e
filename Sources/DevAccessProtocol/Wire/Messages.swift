import DevAccessCore
import DevAccessInterface

/// The protocol between devaccessd and its clients (docs/protocol.md).
///
/// Newline-delimited JSON over a Unix stream socket. Every message is one envelope,
/// `{"version":1,"id":N,"type":"...", ...body}`, on one line of at most
/// `maxRequestSize` bytes (requests) or `maxReplySize` bytes (replies). A reply
/// carries the `id` and the `version` of the request it answers.
///
/// There is one version, 1: `status`, the request conversation (`prompt`,
/// `prompt-answer`, `queued`, `decision`) and the approval queue (`pending`, `approve`,
/// `reject`, ConversationCoding.swift); the operations that decide or record
/// (AdministrationCoding.swift), answered by `result`; `run` (RunCoding.swift); `location`
/// (LocationCoding.swift); `subscribe` and `open` (SubscriptionCoding.swift). Their values
/// are DevAccessInterface's (Values/, the same names without "Coding"). A message of any
/// other version is refused with `unsupported-version`, naming the versions this side
/// speaks; `hello` tells them, so a later version can be negotiated.
public enum BrokerProtocol {
    /// The version this build speaks and writes.
    public static let version: Int64 = 1
    public static let supportedVersions: [Int64] = [version]
    /// 64 KiB: the most a request line may hold before its newline.
    public static let maxRequestSize = 64 * 1024
    /// Replies carry full statuses with devices, nodes and reasons; 1 MiB is far above
    /// what a machine with dozens of devices produces.
    public static let maxReplySize = 1024 * 1024
    /// Request ids are 1...2^53-1 (exact in every JSON implementation); 0 in an error
    /// frame means the request's id could not be read.
    public static let requestIDs: ClosedRange<Int64> = 1...9_007_199_254_740_991
    public static let defaultSocketPath = "/run/devaccess/broker.sock"
    public static let socketEnvironmentVariable = ProcessEnvironment.Name.socket
}

// MARK: - Requests

public struct RequestEnvelope: Sendable, Hashable {
    public var id: Int64
    public var request: Request
    /// The protocol version the message was written in; its replies use the same.
    public var version: Int64

    public init(id: Int64, request: Request, version: Int64 = BrokerProtocol.version) {
        self.id = id
        self.request = request
        self.version = version
    }
}

public enum Request: Sendable, Hashable {
    /// Who the broker sees: version and the peer identity it took from the kernel.
    case hello
    case status(StatusQuery)
    case request(AccessRequest)
    /// The client's answer to a `prompt` of the request with the same id.
    case promptAnswer(PromptAnswer)
    /// Admin: the requests waiting for approval.
    case pending
    /// Admin: grant what a pending request asks for, for the term it asked or the one chosen.
    case approve(PendingAction)
    /// Admin: decline a pending request, recording a denial too with `deny`.
    case reject(PendingAction)
    /// The requester takes back its own pending request (an admin: anyone's).
    case withdraw(PendingAction)
    /// Record an allow or deny for a user and apply it.
    case decide(DecisionOrder)
    case revoke(RevokeOrder)
    case reset(ResetOrder)
    case list(ListQuery)
    /// Apply the whole ledger to the machine.
    case reconcile
    /// Check the audit trail's hash chain, and an archive's.
    case auditVerify(AuditVerifyQuery)
    /// Move old audit events to an archive file.
    case auditArchive(AuditArchiveOrder)
    /// Audit events, their summary, or one event.
    case auditReport(AuditReportQuery)
    /// Start a program with access for it; the streams come as descriptors.
    case run(RunOrder)
    /// A signal for the program of the `run` with the same id.
    case runSignal(RunSignal)
    /// Turn a permission off for everyone, or back on (a privacy switch; admin).
    case setSwitch(SwitchOrder)
    /// The privacy switches that are off (anyone).
    case switches
    /// The machine's position at the caller's granted accuracy.
    case location(LocationQuery)
    /// Status changes of the peer's user, pushed as `update`s until the client leaves.
    case subscribe(SubscribeQuery)
    /// A device node opened by the broker for the peer, passed as a descriptor.
    case open(OpenOrder)

    public var type: String {
        switch self {
        case .hello: return "hello"
        case .status: return "status"
        case .request: return "request"
        case .promptAnswer: return "prompt-answer"
        case .pending: return "pending"
        case .approve: return "approve"
        case .reject: return "reject"
        case .withdraw: return "withdraw"
        case .decide: return "decide"
        case .revoke: return "revoke"
        case .reset: return "reset"
        case .list: return "list"
        case .reconcile: return "reconcile"
        case .auditVerify: return "audit-verify"
        case .auditArchive: return "audit-archive"
        case .auditReport: return "audit-report"
        case .run: return "run"
        case .runSignal: return "run-signal"
        case .setSwitch: return "switch"
        case .switches: return "switches"
        case .location: return "location"
        case .subscribe: return "subscribe"
        case .open: return "open"
        }
    }
}

// MARK: - Replies

public struct ReplyEnvelope: Sendable, Hashable {
    /// The id of the request answered; 0 when it could not be read.
    public var id: Int64
    public var reply: Reply
    /// The version of the request answered (the broker's own when it could not be read).
    public var version: Int64

    public init(id: Int64, reply: Reply, version: Int64 = BrokerProtocol.version) {
        self.id = id
        self.reply = reply
        self.version = version
    }
}

public enum Reply: Sendable, Hashable {
    case hello(HelloReply)
    case status(StatusReply)
    case error(ProtocolError)
    /// A question for the requesting user; the request waits for its `prompt-answer`.
    case prompt(PromptMessage)
    /// Part of a request went to the approval queue; more follows (the final `decision`).
    case queued(QueuedReply)
    /// The final answer to a `request`.
    case decision(DecisionReply)
    /// The answer to `pending`.
    case pending(PendingListReply)
    /// The answer to `approve` and `reject`.
    case resolved(ResolvedReply)
    /// The answer to an operation of AdministrationCoding.swift: its result document.
    case result(OperationResult)
    /// The program of a `run` started; `run-ended` follows.
    case runStarted(RunStartedReply)
    /// The program of a `run` exited.
    case runEnded(RunEndedReply)
    /// Statuses that changed, for a `subscribe`; more follow.
    case update(StatusUpdate)
    /// The node an `open` opened; its descriptor came with the line.
    case opened(OpenedReply)

    public var type: String {
        switch self {
        case .hello: return "hello"
        case .status: return "status"
        case .error: return "error"
        case .prompt: return "prompt"
        case .queued: return "queued"
        case .decision: return "decision"
        case .pending: return "pending"
        case .resolved: return "resolved"
        case .result: return "result"
        case .runStarted: return "run-started"
        case .runEnded: return "run-ended"
        case .update: return "update"
        case .opened: return "opened"
        }
    }

    /// Whether more replies to the same request follow this one.
    public var isInterim: Bool {
        switch self {
        case .prompt, .queued, .runStarted, .update: return true
        default: return false
        }
    }
}

public struct HelloReply: Sendable, Hashable {
    /// "devaccessd 0.1.0".
    public var server: String
    public var versions: [Int64]
    public var peer: PeerInfo

    public init(server: String, versions: [Int64] = BrokerProtocol.supportedVersions, peer: PeerInfo) {
        self.server = server
        self.versions = versions
        self.peer = peer
    }
}
