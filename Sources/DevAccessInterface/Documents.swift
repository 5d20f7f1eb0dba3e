import DevAccessCore

/// The documented JSON of what the operations that decide or record return (docs/json.md):
/// `devaccess ... --json` prints them, and the broker's `result` replies carry them, so a
/// result has one shape wherever it is read. Keys without a value are left out; times
/// are UTC ISO 8601. The engine builds them from its records (DevAccessEngine's
/// EngineDocuments.swift); the contract holds only the values.
public struct GrantListDocument: Codable, Sendable, Hashable {
    public var ledger: String
    public var grants: [GrantDocument]

    public init(ledger: String, grants: [GrantDocument]) {
        self.ledger = ledger
        self.grants = grants
    }
}

public struct GrantDocument: Codable, Sendable, Hashable {
    public var id: Int64
    public var user: String
    public var uid: UInt32
    public var permission: String
    public var device: String?
    public var program: String?
    public var decision: String
    public var scope: String
    public var created: String
    public var expires: String?
    public var ended: String?
    public var active: Bool
    public var decidedBy: String
    public var decidedByUid: UInt32
    public var how: String
    public var reason: String?
    /// A `once` grant of a request: the pid of the process it lasts for.
    public var whilePid: Int32?
    /// An allow of location: its level (`exact` for one recorded before levels existed).
    public var accuracy: String?

    public init(id: Int64, user: String, uid: UInt32, permission: String, decision: String, scope: String,
                created: String, active: Bool, decidedBy: String, decidedByUid: UInt32, how: String) {
        self.id = id
        self.user = user
        self.uid = uid
        self.permission = permission
        self.decision = decision
        self.scope = scope
        self.created = created
        self.active = active
        self.decidedBy = decidedBy
        self.decidedByUid = decidedByUid
        self.how = how
    }
}

public struct EnforcementDocument: Codable, Sendable, Hashable {
    public var expired: [GrantDocument]
    public var endedByPolicy: [PolicyEndedDocument]
    public var changes: [ChangeDocument]
    public var problems: [ProblemDocument]
    public var drift: [DriftDocument]
    public var notes: [String]

    public init(expired: [GrantDocument], endedByPolicy: [PolicyEndedDocument], changes: [ChangeDocument],
                problems: [ProblemDocument], drift: [DriftDocument], notes: [String]) {
        self.expired = expired
        self.endedByPolicy = endedByPolicy
        self.changes = changes
        self.problems = problems
        self.drift = drift
        self.notes = notes
    }
}

/// A grant the policy ended: the grant, the policy's sentence and the rule's `file:line`.
public struct PolicyEndedDocument: Codable, Sendable, Hashable {
    public var grant: GrantDocument
    public var reason: String
    public var rule: String?

    public init(grant: GrantDocument, reason: String, rule: String?) {
        self.grant = grant
        self.reason = reason
        self.rule = rule
    }
}

public struct ChangeDocument: Codable, Sendable, Hashable {
    public var action: String
    public var node: String
    public var user: String
    public var uid: UInt32
    public var permission: String?
    public var device: String
    public var grant: Int64?
    public var message: String

    public init(action: String, node: String, user: String, uid: UInt32, permission: String?, device: String,
                grant: Int64?, message: String) {
        self.action = action
        self.node = node
        self.user = user
        self.uid = uid
        self.permission = permission
        self.device = device
        self.grant = grant
        self.message = message
    }
}

public struct ProblemDocument: Codable, Sendable, Hashable {
    public var kind: String
    public var node: String
    public var user: String
    public var uid: UInt32
    public var permission: String?
    public var device: String?
    public var message: String

    public init(kind: String, node: String, user: String, uid: UInt32, permission: String?, device: String?,
                message: String) {
        self.kind = kind
        self.node = node
        self.user = user
        self.uid = uid
        self.permission = permission
        self.device = device
        self.message = message
    }
}

public struct DriftDocument: Codable, Sendable, Hashable {
    public var kind: String
    public var node: String
    public var user: String
    public var uid: UInt32
    public var permission: String
    public var device: String
    public var grant: Int64?
    public var message: String

    public init(kind: String, node: String, user: String, uid: UInt32, permission: String, device: String,
                grant: Int64?, message: String) {
        self.kind = kind
        self.node = node
        self.user = user
        self.uid = uid
        self.permission = permission
        self.device = device
        self.grant = grant
        self.message = message
    }
}


extension GrantDocument {
    /// "grant 12: allow camera for alice (1001) on every device, until 2026-12-01T18:00:00Z".
    public var line: String {
        "grant \(id): \(decision) \(permissionText) for \(user) (\(uid))"
            + (program.map { " running \($0) (devaccess run)" } ?? "") + " on "
            + (device.map { "device \($0)" } ?? "every device") + ", " + term
    }

    /// "location (city)" for a grant of location at a level; else the permission.
    public var permissionText: String {
        permission + (accuracy.map { " (\($0))" } ?? "")
    }

    public var term: String {
        // "once" would read as a single use: the grant lasts as long as that process.
        if let pid = whilePid { return "until pid \(pid) exits" + (expires.map { ", at most until \($0)" } ?? "") }
        return scope == "always" ? "always" : expires.map { "until \($0)" } ?? scope
    }
}

extension EnforcementDocument {
    /// Whether a node was refused or an edit failed (the commands then exit 1).
    public var hasProblems: Bool { !problems.isEmpty }
    public var changedNothing: Bool { expired.isEmpty && endedByPolicy.isEmpty && changes.isEmpty }
}

/// `grant` and `deny`: the decision recorded, the allows it ended, and the engine run.
public struct DecisionDocument: Codable, Sendable, Hashable {
    public var grant: GrantDocument
    public var ended: [GrantDocument]
    public var report: EnforcementDocument

    public init(grant: GrantDocument, ended: [GrantDocument], report: EnforcementDocument) {
        self.grant = grant
        self.ended = ended
        self.report = report
    }
}

/// `revoke`: the grants ended, the grants for every device that still cover `--device`.
public struct RevokeDocument: Codable, Sendable, Hashable {
    public var revoked: [GrantDocument]
    public var stillCovering: [GrantDocument]
    public var report: EnforcementDocument
    /// `--terminate`: the processes of runs that were ended, and how.
    public var terminated: [TerminatedProcess]?

    public struct TerminatedProcess: Codable, Sendable, Hashable {
        public var run: Int64
        public var pid: Int32
        /// "terminated" (SIGTERM), "killed" (SIGKILL after the grace), "not-running", "refused: ...".
        public var ending: String

        public init(run: Int64, pid: Int32, ending: String) {
            self.run = run
            self.pid = pid
            self.ending = ending
        }
    }

    public init(revoked: [GrantDocument], stillCovering: [GrantDocument], report: EnforcementDocument,
                terminated: [TerminatedProcess]? = nil) {
        self.revoked = revoked
        self.stillCovering = stillCovering
        self.report = report
        self.terminated = terminated
    }
}

/// `reset`: the decisions forgotten.
public struct ResetDocument: Codable, Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var permission: String?
    public var deleted: [GrantDocument]
    public var report: EnforcementDocument

    public init(user: String, uid: UInt32, permission: String?, deleted: [GrantDocument],
                report: EnforcementDocument) {
        self.user = user
        self.uid = uid
        self.permission = permission
        self.deleted = deleted
        self.report = report
    }
}

/// `audit --verify`.
public struct AuditVerifyDocument: Codable, Sendable, Hashable {
    public var ledger: String
    public var intact: Bool
    /// Events checked (intact chains).
    public var events: Int64?
    /// Where it breaks: the event's sequence number, the kind (`edited`, `removed`, ...), why.
    public var brokenAt: Int64?
    public var kind: String?
    public var explanation: String?
    public var message: String
    /// After `audit --archive`: events up to this seq are in archives; the ledger's chain
    /// starts from the hash of that event (`anchorHash`), as recorded by event `anchorEvent`.
    public var archivedThrough: Int64?
    public var anchorHash: String?
    public var anchorEvent: Int64?
    /// With `--archive-file`: that archive's chain and its link to the ledger.
    public var archive: ArchiveVerifyDocument?
    /// Reports: the walk started after this event, which devaccessd had verified intact
    /// earlier (its checkpoint); absent: the whole chain was walked.
    public var checkedFrom: Int64?

    /// Both the ledger and the archive asked about (if any) verify.
    public var allIntact: Bool { intact && archive?.intact != false }

    public init(ledger: String, intact: Bool, message: String) {
        self.ledger = ledger
        self.intact = intact
        self.message = message
    }
}

/// `audit --verify --archive-file FILE`: the archive's own chain, and whether the ledger
/// records it with the same range and hashes.
public struct ArchiveVerifyDocument: Codable, Sendable, Hashable {
    public var path: String
    /// The chain is intact and the ledger's record agrees (`link` is `anchored`).
    public var intact: Bool
    public var firstSeq: Int64
    public var lastSeq: Int64
    public var lastHash: String
    /// Events checked (intact chains).
    public var events: Int64?
    public var brokenAt: Int64?
    public var kind: String?
    public var explanation: String?
    /// `anchored` (an `archived` event records it as it is), `mismatch`, `unrecorded`.
    public var link: String
    /// The `archived` event of the ledger that records it.
    public var linkEvent: Int64?
    public var linkExplanation: String?
    public var message: String

    public init(path: String, intact: Bool, firstSeq: Int64, lastSeq: Int64, lastHash: String, link: String,
                message: String) {
        self.path = path
        self.intact = intact
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
        self.lastHash = lastHash
        self.link = link
        self.message = message
    }
}

/// `audit --archive BEFORE`: what moved where, and the hash the ledger's chain now starts from.
public struct AuditArchiveDocument: Codable, Sendable, Hashable {
    public var ledger: String
    /// Events older than this were moved (ISO 8601, UTC).
    public var before: String
    /// How many moved (0: none was old enough; no file was written).
    public var events: Int64
    public var archive: String?
    public var firstSeq: Int64?
    public var lastSeq: Int64?
    /// The hash of the last moved event: the ledger's remaining chain starts from it.
    public var anchorHash: String?
    /// The `archived` event recording the move.
    public var anchorEvent: Int64?
    /// The ledger was compacted afterwards (VACUUM); its size with the WAL before and after.
    public var vacuumed: Bool
    public var ledgerBytesBefore: Int64?
    public var ledgerBytesAfter: Int64?
    public var message: String

    public init(ledger: String, before: String, events: Int64, vacuumed: Bool, message: String) {
        self.ledger = ledger
        self.before = before
        self.events = events
        self.vacuumed = vacuumed
        self.message = message
    }
}

/// `withdraw`: the pending request as it now stands.
public struct WithdrawDocument: Codable, Sendable, Hashable {
    public var pending: Int64
    public var user: String
    public var uid: UInt32
    public var permissions: [String]
    public var resolution: String

    public init(pending: Int64, user: String, uid: UInt32, permissions: [String], resolution: String) {
        self.pending = pending
        self.user = user
        self.uid = uid
        self.permissions = permissions
        self.resolution = resolution
    }
}

/// `switch` and `switches` (the `devaccess switch --json` document): every permission's
/// switch, and for a change, what the engine did and who still holds the nodes open.
public struct SwitchesDocument: Codable, Sendable, Hashable {
    public struct State: Codable, Sendable, Hashable {
        public var permission: String
        /// "on" or "off".
        public var state: String
        public var hard: Bool?
        public var by: String?
        public var byUid: UInt32?
        public var since: String?
        /// When it turns itself back on; absent: when an administrator turns it on.
        public var expires: String?
        public var reason: String?
        /// What status says while it is off ("switched off by root at ...: exam week").
        public var restricted: String?

        /// A switch that is on; the engine fills in who turned it off, when and why.
        public init(permission: String, state: String) {
            self.permission = permission
            self.state = state
        }
    }

    /// Processes that held the permission's nodes open right after it was switched off: an
    /// ACL change closes nothing already open (`devaccess who`).
    public struct StillOpen: Codable, Sendable, Hashable {
        public var processes: Int
        /// Processes whose descriptors could not be read.
        public var uninspected: Int

        public init(processes: Int, uninspected: Int) {
            self.processes = processes
            self.uninspected = uninspected
        }
    }

    public var switches: [State]
    /// `switch` only: false when it already was as asked.
    public var changed: Bool?
    public var enforcement: EnforcementDocument?
    public var stillOpen: StillOpen?

    public init(switches: [State], changed: Bool? = nil, enforcement: EnforcementDocument? = nil,
                stillOpen: StillOpen? = nil) {
        self.switches = switches
        self.changed = changed
        self.enforcement = enforcement
        self.stillOpen = stillOpen
    }
}
