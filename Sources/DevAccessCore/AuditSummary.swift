// The audit report's counts and chain positions: values the ledger computes and the
// contract's `audit-report` result carries (docs/json.md, "audit reports").

/// Counts of what happened, for one permission, one user, or everything. Grants are split
/// by how they were decided (`how` in the event: consent, auth_self, admin, policy).
public struct AuditCounts: Sendable, Hashable, Codable {
    public var events: Int64 = 0
    public var requests: Int64 = 0
    public var grantsConsent: Int64 = 0
    public var grantsPassword: Int64 = 0
    public var grantsAdmin: Int64 = 0
    public var grantsPolicy: Int64 = 0
    public var denials: Int64 = 0
    public var revocations: Int64 = 0
    public var expiries: Int64 = 0
    public var resets: Int64 = 0
    public var refusals: Int64 = 0
    public var queued: Int64 = 0
    public var driftFound: Int64 = 0
    public var driftRepaired: Int64 = 0
    public var hotplug: Int64 = 0
    public var runs: Int64 = 0
    /// How long the runs that ended took together (`run_end` events' `duration_usec`), seconds.
    public var runSeconds: Int64 = 0
    /// The first and last event counted (seq numbers), to drill into with `audit --event N`.
    public var firstEvent: Int64?
    public var lastEvent: Int64?

    public init() {}

    public var grants: Int64 { grantsConsent + grantsPassword + grantsAdmin + grantsPolicy }
}

/// One row of a summary: a permission or a user, and its counts.
public struct AuditSummaryRow: Sendable, Hashable, Codable {
    /// The permission's name, or the user's name (`-` for events about no user).
    public var key: String
    /// The user's uid (user rows only).
    public var uid: UInt32?
    public var counts: AuditCounts

    public init(key: String, uid: UInt32? = nil, counts: AuditCounts) {
        self.key = key
        self.uid = uid
        self.counts = counts
    }
}

/// A program and how many events name it.
public struct AuditProgramRow: Sendable, Hashable, Codable {
    public var program: String
    public var events: Int64
    public var firstEvent: Int64
    public var lastEvent: Int64

    public init(program: String, events: Int64, firstEvent: Int64, lastEvent: Int64) {
        self.program = program
        self.events = events
        self.firstEvent = firstEvent
        self.lastEvent = lastEvent
    }
}

/// What `audit --summary` shows, counted over the filtered events.
public struct AuditSummary: Sendable, Hashable, Codable {
    public var total: AuditCounts
    public var permissions: [AuditSummaryRow]
    /// Per user: the subject the event is about, or (refusals, admin work) its actor.
    public var users: [AuditSummaryRow]
    /// The programs named most often, most first.
    public var programs: [AuditProgramRow]

    public init(total: AuditCounts = AuditCounts(), permissions: [AuditSummaryRow] = [], users: [AuditSummaryRow] = [],
                programs: [AuditProgramRow] = []) {
        self.total = total
        self.permissions = permissions
        self.users = users
        self.programs = programs
    }

    /// How many programs the summary lists.
    public static let topPrograms = 10
}

/// Where one event sits in the chain, recomputed from the stored bytes.
public struct AuditChainPosition: Sendable, Hashable, Codable {
    public var seq: Int64
    public var prevHash: String
    public var hash: String
    /// The stored fields still hash to the stored hash.
    public var hashMatches: Bool
    /// The event before it is stored and its hash is this event's prev_hash (nil: no
    /// event before it in this file: the first event, or the ones before were archived).
    public var linksToPrevious: Bool?
    /// The event after it names this event's hash as its prev_hash (nil: it is the newest).
    public var linkedFromNext: Bool?
    /// The first and newest event stored in the ledger.
    public var firstStored: Int64
    public var head: Int64

    public init(seq: Int64, prevHash: String, hash: String, hashMatches: Bool, linksToPrevious: Bool?,
                linkedFromNext: Bool?, firstStored: Int64, head: Int64) {
        self.seq = seq
        self.prevHash = prevHash
        self.hash = hash
        self.hashMatches = hashMatches
        self.linksToPrevious = linksToPrevious
        self.linkedFromNext = linkedFromNext
        self.firstStored = firstStored
        self.head = head
    }
}
