import DevAccessCore

// What `status` and `request` ask, the status a reply carries, and the peer as the broker
// identified it (`hello`); their envelopes and wire form: DevAccessProtocol (Messages.swift,
// MessageCodec.swift).

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
    /// nil: the policy's Keep= duration, else once.
    public var scope: GrantTerm?
    /// When an administrator must approve: keep the request open until they decide,
    /// instead of answering at once with the request queued.
    public var wait: Bool
    /// How precisely to know where the machine is, with `location` only; nil: exact. The
    /// policy's `MaxAccuracy=` may answer with a coarser level, never a finer one.
    public var accuracy: LocationAccuracy?

    public init(permissions: [Permission], reason: String? = nil, scope: GrantTerm? = nil, wait: Bool = false,
                accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.permissions = permissions
        self.reason = reason
        self.scope = scope
        self.wait = wait
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
