import DevAccessSystem
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import FoundationEssentials
import Glibc

/// The documented JSON of what the operations that decide or record return (docs/json.md):
/// `devaccess ... --json` prints them, and the broker's `result` replies carry them, so a
/// result has one shape wherever it is read. Keys without a value are left out; times
/// are UTC ISO 8601.
public struct GrantListDocument: Codable, Sendable, Hashable {
    public var ledger: String
    public var grants: [GrantDocument]
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

    public init(_ grant: Grant, now: Date) {
        accuracy = grant.locationLevel?.rawValue
        whilePid = grant.holder?.pid
        id = grant.id
        user = grant.subject.name
        uid = grant.subject.uid
        permission = grant.permission.rawValue
        device = grant.deviceID
        program = grant.program?.path
        decision = grant.decision.rawValue
        // The term as requests spell it (`for`, with `expires` the moment it ends).
        scope = grant.scope.rawValue
        created = ISOTime.format(grant.created)
        expires = grant.expires.map(ISOTime.format)
        ended = grant.revoked.map(ISOTime.format)
        active = grant.isActive(at: now)
        decidedBy = grant.decidedBy.name
        decidedByUid = grant.decidedBy.uid
        how = grant.method.rawValue
        reason = grant.reason.isEmpty ? nil : grant.reason
    }
}

public struct EnforcementDocument: Codable, Sendable, Hashable {
    public var expired: [GrantDocument]
    public var endedByPolicy: [PolicyEndedDocument]
    public var changes: [ChangeDocument]
    public var problems: [ProblemDocument]
    public var drift: [DriftDocument]
    public var notes: [String]

    public init(_ report: EnforcementReport, now: Date) {
        expired = report.expired.map { GrantDocument($0, now: now) }
        endedByPolicy = report.endedByPolicy.map { PolicyEndedDocument($0, now: now) }
        changes = report.changes.map(ChangeDocument.init)
        problems = report.problems.map(ProblemDocument.init)
        drift = report.drift.map(DriftDocument.init)
        notes = report.notes
    }
}

/// A grant the policy ended: the grant, the policy's sentence and the rule's `file:line`.
public struct PolicyEndedDocument: Codable, Sendable, Hashable {
    public var grant: GrantDocument
    public var reason: String
    public var rule: String?

    public init(_ ended: PolicyEnded, now: Date) {
        grant = GrantDocument(ended.grant, now: now)
        reason = ended.reason
        rule = ended.rule
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

    public init(_ change: EnforcementChange) {
        action = change.action.rawValue
        node = change.nodePath
        user = change.userName
        uid = change.uid
        permission = change.permission?.rawValue
        device = change.deviceID
        grant = change.grantID
        message = change.message
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

    public init(_ problem: EnforcementProblem) {
        kind = problem.kind.rawValue
        node = problem.nodePath
        user = problem.userName
        uid = problem.uid
        permission = problem.permission?.rawValue
        device = problem.deviceID
        message = problem.message
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

    public init(_ item: DriftItem) {
        kind = item.kind.rawValue
        node = item.nodePath
        user = item.userName
        uid = item.uid
        permission = item.permission.rawValue
        device = item.deviceID
        grant = item.grantID
        message = item.message
    }
}


extension GrantListDocument {
    public init(ledger: String, grants: [Grant], now: Date) {
        self.ledger = ledger
        self.grants = grants.map { GrantDocument($0, now: now) }
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
        if let pid = whilePid { return "once, while pid \(pid) runs" + (expires.map { ", until \($0)" } ?? "") }
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

    public init(_ outcome: Enforcer.DecisionOutcome, now: Date) {
        grant = GrantDocument(outcome.grant, now: now)
        ended = outcome.ended.map { GrantDocument($0, now: now) }
        report = EnforcementDocument(outcome.report, now: now)
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

    public init(_ outcome: Enforcer.RevokeOutcome, now: Date) {
        revoked = outcome.revoked.map { GrantDocument($0, now: now) }
        stillCovering = outcome.stillCovering.map { GrantDocument($0, now: now) }
        report = EnforcementDocument(outcome.report, now: now)
    }
}

/// `reset`: the decisions forgotten.
public struct ResetDocument: Codable, Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var permission: String?
    public var deleted: [GrantDocument]
    public var report: EnforcementDocument

    public init(_ outcome: Enforcer.ResetOutcome, subject: Principal, permission: Permission?, now: Date) {
        user = subject.name
        uid = subject.uid
        self.permission = permission?.rawValue
        deleted = outcome.deleted.map { GrantDocument($0, now: now) }
        report = EnforcementDocument(outcome.report, now: now)
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

    public init(_ verification: ChainVerification, ledger: String, anchor: ArchiveAnchor? = nil) {
        self.ledger = ledger
        message = verification.description
        archivedThrough = anchor?.throughSeq
        anchorHash = anchor?.throughHash
        anchorEvent = anchor?.eventSeq
        switch verification {
        case .intact(let count):
            intact = true
            events = count
        case .broken(let chainBreak):
            intact = false
            brokenAt = chainBreak.seq
            kind = chainBreak.kind.rawValue
            explanation = chainBreak.explanation
        }
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

    public init(_ verification: ArchiveVerification) {
        path = verification.path
        intact = verification.isIntact
        firstSeq = verification.firstSeq
        lastSeq = verification.throughSeq
        lastHash = verification.throughHash
        switch verification.chain {
        case .intact(let count): events = count
        case .broken(let chainBreak):
            brokenAt = chainBreak.seq
            kind = chainBreak.kind.rawValue
            explanation = chainBreak.explanation
        }
        switch verification.link {
        case .anchored(let seq):
            link = "anchored"
            linkEvent = seq
        case .mismatch(let seq, let text):
            link = "mismatch"
            linkEvent = seq
            linkExplanation = text
        case .unrecorded(let text):
            link = "unrecorded"
            linkExplanation = text
        }
        let range = "events \(firstSeq)...\(lastSeq)"
        if case .broken(let chainBreak) = verification.chain {
            message = "archive chain broken: \(chainBreak)"
        } else if let linkEvent, link == "anchored" {
            message = "archive intact: \(range), recorded by event \(linkEvent) of the ledger"
        } else {
            message = "archive chain intact (\(range)) but not linked to the ledger: \(linkExplanation ?? link)"
        }
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

    public init(_ outcome: AuditArchiveOutcome, ledger: String) {
        self.ledger = ledger
        before = ISOTime.format(outcome.before)
        vacuumed = outcome.vacuumed
        ledgerBytesBefore = outcome.ledgerBytesBefore
        ledgerBytesAfter = outcome.ledgerBytesAfter
        guard let anchor = outcome.anchor else {
            events = 0
            message = "no audit event is older than \(before): nothing was archived"
            return
        }
        events = anchor.events
        archive = anchor.archivePath
        firstSeq = anchor.firstSeq
        lastSeq = anchor.throughSeq
        anchorHash = anchor.throughHash
        anchorEvent = anchor.eventSeq
        message = "archived \(anchor.events) events (\(anchor.firstSeq)...\(anchor.throughSeq)) older than \(before) "
            + "to \(anchor.archivePath); the ledger's chain continues from hash \(anchor.throughHash), recorded by "
            + "event \(anchor.eventSeq)"
        if let from = ledgerBytesBefore, let to = ledgerBytesAfter {
            message += "; ledger \(from / 1024) KiB -> \(to / 1024) KiB" + (vacuumed ? "" : " (not compacted: its free "
                + "space is reused by new events)")
        }
    }
}

/// `withdraw`: the pending request as it now stands.
public struct WithdrawDocument: Codable, Sendable, Hashable {
    public var pending: Int64
    public var user: String
    public var uid: UInt32
    public var permissions: [String]
    public var resolution: String

    public init(_ request: PendingRequest) {
        pending = request.id
        user = request.subject.name
        uid = request.subject.uid
        permissions = request.permissions.map(\.rawValue)
        resolution = request.resolution?.rawValue ?? "waiting"
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

        public init(permission: Permission, off: PrivacySwitch?) {
            self.permission = permission.rawValue
            state = off == nil ? "on" : "off"
            guard let off else { return }
            hard = off.hard
            by = off.by.name
            byUid = off.by.uid
            since = ISOTime.format(off.since)
            expires = off.until.map(ISOTime.format)
            reason = off.reason.isEmpty ? nil : off.reason
            restricted = off.sentence(formatTime: ISOTime.format)
        }
    }

    /// Processes that held the permission's nodes open right after it was switched off: an
    /// ACL change closes nothing already open (`devaccess who`).
    public struct StillOpen: Codable, Sendable, Hashable {
        public var processes: Int
        /// Processes whose descriptors could not be read.
        public var uninspected: Int
    }

    public var switches: [State]
    /// `switch` only: false when it already was as asked.
    public var changed: Bool?
    public var enforcement: EnforcementDocument?
    public var stillOpen: StillOpen?

    public init(switches off: [PrivacySwitch], changed: Bool? = nil, report: EnforcementReport? = nil,
                stillOpen: StillOpen? = nil, now: Date) {
        switches = Permission.all.map { permission in
            State(permission: permission, off: off.first { $0.permission == permission })
        }
        self.changed = changed
        enforcement = report.map { EnforcementDocument($0, now: now) }
        self.stillOpen = stillOpen
    }
}
