import DevAccessCore

/// The protocol between devaccessd and its clients (docs/protocol.md).
///
/// Newline-delimited JSON over a Unix stream socket. Every message is one envelope,
/// `{"version":1,"id":N,"type":"...", ...body}`, on one line of at most
/// `maxRequestSize` bytes (requests) or `maxReplySize` bytes (replies). A reply
/// carries the `id` of the request it answers.
public enum BrokerProtocol {
    /// The one version this build speaks.
    public static let version: Int64 = 1
    public static let supportedVersions: [Int64] = [1]
    /// 64 KiB: the most a request line may hold before its newline.
    public static let maxRequestSize = 64 * 1024
    /// Replies carry full statuses with devices, nodes and reasons; 1 MiB is far above
    /// what a machine with dozens of devices produces.
    public static let maxReplySize = 1024 * 1024
    /// Request ids are 1...2^53-1 (exact in every JSON implementation); 0 in an error
    /// frame means the request's id could not be read.
    public static let requestIDs: ClosedRange<Int64> = 1...9_007_199_254_740_991
    public static let defaultSocketPath = "/run/devaccess/broker.sock"
    public static let socketEnvironmentVariable = "DEVACCESS_SOCKET"
}

// MARK: - Requests

public struct RequestEnvelope: Sendable, Hashable {
    public var id: Int64
    public var request: Request

    public init(id: Int64, request: Request) {
        self.id = id
        self.request = request
    }
}

public enum Request: Sendable, Hashable {
    /// Who the broker sees: version and the peer identity it took from the kernel.
    case hello
    case status(StatusQuery)
    case request(AccessRequest)

    public var type: String {
        switch self {
        case .hello: return "hello"
        case .status: return "status"
        case .request: return "request"
        }
    }
}

/// `status`: the statuses of some permissions (nil: all) for the peer, or for `user`
/// (a name or a decimal uid), which only root and admins may ask about when it is
/// not the peer.
public struct StatusQuery: Sendable, Hashable {
    public var permissions: [Permission]?
    public var user: String?

    public init(permissions: [Permission]? = nil, user: String? = nil) {
        self.permissions = permissions
        self.user = user
    }
}

/// `request`: the peer asks for permissions for itself.
public struct AccessRequest: Sendable, Hashable {
    public var permissions: [Permission]
    /// Rationale shown to whoever decides (at most 1024 bytes).
    public var reason: String?
    public var scope: RequestScope

    public init(permissions: [Permission], reason: String? = nil, scope: RequestScope) {
        self.permissions = permissions
        self.reason = reason
        self.scope = scope
    }
}

public enum RequestScope: Sendable, Hashable {
    /// One use (one `devaccess run`).
    case once
    /// For `seconds` seconds from the decision (1 second ... 366 days).
    case duration(seconds: Int64)
    case always

    public static let maxDurationSeconds: Int64 = 366 * 24 * 3600
}

// MARK: - Replies

public struct ReplyEnvelope: Sendable, Hashable {
    /// The id of the request answered; 0 when it could not be read.
    public var id: Int64
    public var reply: Reply

    public init(id: Int64, reply: Reply) {
        self.id = id
        self.reply = reply
    }
}

public enum Reply: Sendable, Hashable {
    case hello(HelloReply)
    case status(StatusReply)
    case error(ProtocolError)

    public var type: String {
        switch self {
        case .hello: return "hello"
        case .status: return "status"
        case .error: return "error"
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

/// The peer as the broker identified it: SO_PEERCRED, SO_PEERGROUPS, /proc/PID/exe.
public struct PeerInfo: Sendable, Hashable {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    /// Supplementary groups of the peer process at connect time.
    public var groups: [UInt32]
    public var user: String?
    /// The executable the peer process ran when the broker accepted the connection.
    public var program: String?
    /// Root or a member of the admin group.
    public var admin: Bool

    public init(uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32], user: String?, program: String?, admin: Bool) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.groups = groups
        self.user = user
        self.program = program
        self.admin = admin
    }
}

public struct StatusReply: Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var permissions: [PermissionStatus]

    public init(user: String, uid: UInt32, permissions: [PermissionStatus]) {
        self.user = user
        self.uid = uid
        self.permissions = permissions
    }
}
