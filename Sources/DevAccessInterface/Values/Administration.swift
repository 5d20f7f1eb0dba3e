import DevAccessCore

// The operations that decide or record for someone (docs/protocol.md,
// "Administration"). The broker serves them to root and members of the admin group,
// and to any user for their own decisions and pending requests; everything else is
// refused and audited. Their results travel as `result` replies whose `document` is
// the operation's documented JSON (docs/json.md): the wire and `--json` share one shape.

/// `decide`: record an allow or a deny for `user` and apply it to the nodes.
public struct DecisionOrder: Sendable, Hashable {
    /// true: allow (`devaccess grant`); false: deny.
    public var allow: Bool
    public var permission: Permission
    /// A user name or a decimal uid.
    public var user: String
    /// nil: every device of the permission.
    public var device: String?
    /// nil: until revoked; else when the decision ends, in milliseconds since 1970 UTC.
    public var expiresMilliseconds: Int64?
    /// `--for`: the decision ends this many seconds after devaccessd records it. Counted by
    /// the recorder's clock, not the sender's, so the time a request spends on its way (or
    /// waiting for the engine) is not taken off the term. Excludes `expiresMilliseconds`.
    public var lastingSeconds: Int64?
    public var reason: String?
    /// A program grant: only runs of this program (`devaccess run`) by the user
    /// use it. An absolute path; nil: the user's every program.
    public var program: String?
    /// A grant of location: how precisely the user is told where the machine is (wire
    /// `accuracy`); nil: exact. Only with `allow` and `location`.
    public var accuracy: LocationAccuracy?

    public init(allow: Bool, permission: Permission, user: String, device: String? = nil,
                expiresMilliseconds: Int64? = nil, lastingSeconds: Int64? = nil, reason: String? = nil,
                program: String? = nil, accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.program = program
        self.lastingSeconds = lastingSeconds
        self.allow = allow
        self.permission = permission
        self.user = user
        self.device = device
        self.expiresMilliseconds = expiresMilliseconds
        self.reason = reason
    }
}

/// `revoke`: end a user's allow grants of a permission (for one device when given).
public struct RevokeOrder: Sendable, Hashable {
    public var permission: Permission
    /// A user name or a decimal uid (a deleted account's uid is accepted).
    public var user: String
    public var device: String?
    public var reason: String?
    /// Only the program grants of this program; nil: every allow grant.
    public var program: String?
    /// Also end the runs (`devaccess run`) the revoked grants served.
    public var terminate: Bool

    public init(permission: Permission, user: String, device: String? = nil, reason: String? = nil,
                program: String? = nil, terminate: Bool = false) {
        self.program = program
        self.terminate = terminate
        self.permission = permission
        self.user = user
        self.device = device
        self.reason = reason
    }
}

/// `reset`: forget a user's decisions (of one permission, or all).
public struct ResetOrder: Sendable, Hashable {
    public var user: String
    public var permission: Permission?

    public init(user: String, permission: Permission? = nil) {
        self.user = user
        self.permission = permission
    }
}

/// `list`: decisions in the ledger. `user` nil: everyone's for an admin, the peer's own
/// for anyone else.
public struct ListQuery: Sendable, Hashable {
    public var user: String?
    public var permission: Permission?
    /// Also decisions that ended (revoked, expired).
    public var all: Bool

    public init(user: String? = nil, permission: Permission? = nil, all: Bool = false) {
        self.user = user
        self.permission = permission
        self.all = all
    }
}

/// `audit-verify`: the ledger's chain, and with `archive` also that archive file's chain
/// and its link to the ledger.
public struct AuditVerifyQuery: Sendable, Hashable {
    /// An archive file's path. The broker opens only archives the ledger records, unless
    /// the peer is root.
    public var archive: String?

    public init(archive: String? = nil) {
        self.archive = archive
    }
}

/// `audit-archive`: move the audit events older than `beforeMilliseconds` to a new archive
/// file, at `to` (root only) or in the state directory.
public struct AuditArchiveOrder: Sendable, Hashable {
    /// Milliseconds since 1970 UTC.
    public var beforeMilliseconds: Int64
    public var to: String?

    public init(beforeMilliseconds: Int64, to: String? = nil) {
        self.beforeMilliseconds = beforeMilliseconds
        self.to = to
    }
}

/// `audit-report`: the audit events matching the filters, a page at a time (`events`),
/// their counts (`summary`), or one event with its place in the chain (`event`). Times are
/// milliseconds since 1970 UTC; the client resolves words like `today` in its own time zone.
public struct AuditReportQuery: Sendable, Hashable {
    public enum Mode: String, Sendable, Hashable, CaseIterable {
        case events, summary, event
    }

    public var mode: Mode
    public var sinceMilliseconds: Int64?
    public var untilMilliseconds: Int64?
    /// A user name or a decimal uid: events about or caused by that user.
    public var user: String?
    /// A program's full path, or its file name.
    public var program: String?
    public var permission: Permission?
    /// A device's stable id or recorded name.
    public var device: String?
    /// Event types; empty: all.
    public var types: [String]
    /// `events`: only events with a larger seq (the cursor of the previous page).
    public var after: Int64
    /// `events`: at most this many (the broker may return fewer to stay under the reply limit).
    public var limit: Int64?
    /// `event`: its seq.
    public var event: Int64?
    /// Walk the hash chain and report its state in the document (a report's first page).
    public var verify: Bool
    /// `events`: only what the HTML timeline draws (of the details only the keys it reads,
    /// `AuditTimelineEvent.detailKeys`; no hashes, no node): a fraction of the reading and of the reply.
    public var timeline: Bool
    /// `events` (`--follow`): when nothing after `after` matches, hold the reply up to this
    /// many seconds until an event is written, then read again (1...`maxWait`).
    public var waitSeconds: Int64?
    /// Archive files (absolute paths, of `audit --archive`) whose events the report includes,
    /// each with its own chain checked.
    public var archives: [String]

    public init(mode: Mode, sinceMilliseconds: Int64? = nil, untilMilliseconds: Int64? = nil, user: String? = nil,
                program: String? = nil, permission: Permission? = nil, device: String? = nil, types: [String] = [],
                after: Int64 = 0, limit: Int64? = nil, event: Int64? = nil, verify: Bool = true,
                timeline: Bool = false, waitSeconds: Int64? = nil, archives: [String] = []) {
        self.mode = mode
        self.sinceMilliseconds = sinceMilliseconds
        self.untilMilliseconds = untilMilliseconds
        self.user = user
        self.program = program
        self.permission = permission
        self.device = device
        self.types = types
        self.after = after
        self.limit = limit
        self.event = event
        self.verify = verify
        self.timeline = timeline
        self.waitSeconds = waitSeconds
        self.archives = archives
    }

    /// The most events one page holds.
    public static let maxLimit: Int64 = 1000
    /// The longest a follow request is held (well inside the client's 60 s reply timeout).
    public static let maxWait: Int64 = 30
    /// The most archive files one report reads.
    public static let maxArchives = 64
}

/// `switch`: turn a permission off for everyone, or back on (a privacy switch).
public struct SwitchOrder: Sendable, Hashable {
    public var permission: Permission
    public var off: Bool
    /// Also take away the access others gave the capture nodes (saved, put back on `on`).
    public var hard: Bool
    public var reason: String?
    /// `off` only (wire `expires`): when it turns itself back on, in milliseconds since 1970 UTC.
    public var expiresMilliseconds: Int64?
    /// `off` only (`--for`): it turns itself back on this many seconds after devaccessd
    /// records it, by devaccessd's clock. Excludes `expiresMilliseconds`.
    public var lastingSeconds: Int64?

    public init(permission: Permission, off: Bool, hard: Bool = false, reason: String? = nil,
                expiresMilliseconds: Int64? = nil, lastingSeconds: Int64? = nil) {
        self.lastingSeconds = lastingSeconds
        self.permission = permission
        self.off = off
        self.hard = hard
        self.reason = reason
        self.expiresMilliseconds = expiresMilliseconds
    }
}

/// The answer to every operation of this file: its result document.
public struct OperationResult: Sendable, Hashable {
    /// The request type this answers (`decide`, `list`, ...).
    public var operation: String
    /// A JSON object, documented per operation in docs/json.md.
    public var document: JSONValue

    public init(operation: String, document: JSONValue) {
        self.operation = operation
        self.document = document
    }
}
