import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessInterface
import FoundationEssentials

// The contract's result documents built from the engine's records: the contract holds the
// values, the engine knows the ledger and enforcement types they come from.

extension GrantDocument {
    public init(_ grant: Grant, now: Date) {
        self.init(id: grant.id, user: grant.subject.name, uid: grant.subject.uid, permission: grant.permission.rawValue,
                  decision: grant.decision.rawValue, scope: grant.scope.recordedName,
                  created: ISOTime.format(grant.created), active: grant.isActive(at: now),
                  decidedBy: grant.decidedBy.name, decidedByUid: grant.decidedBy.uid, how: grant.method.rawValue)
        accuracy = grant.locationLevel?.rawValue
        whilePid = grant.holder?.pid
        device = grant.deviceID
        program = grant.program?.path
        expires = grant.expires.map(ISOTime.format)
        ended = grant.revoked.map(ISOTime.format)
        reason = grant.reason.isEmpty ? nil : grant.reason
    }
}

extension GrantListDocument {
    public init(ledger: String, grants: [Grant], now: Date) {
        self.init(ledger: ledger, grants: grants.map { GrantDocument($0, now: now) })
    }
}

extension EnforcementDocument {
    public init(_ report: EnforcementReport, now: Date) {
        self.init(expired: report.expired.map { GrantDocument($0, now: now) },
                  endedByPolicy: report.endedByPolicy.map { PolicyEndedDocument($0, now: now) },
                  changes: report.changes.map(ChangeDocument.init), problems: report.problems.map(ProblemDocument.init),
                  drift: report.drift.map(DriftDocument.init), notes: report.notes)
    }
}

extension PolicyEndedDocument {
    public init(_ ended: PolicyEnded, now: Date) {
        self.init(grant: GrantDocument(ended.grant, now: now), reason: ended.reason, rule: ended.rule)
    }
}

extension ChangeDocument {
    public init(_ change: EnforcementChange) {
        self.init(action: change.action.rawValue, node: change.nodePath, user: change.userName, uid: change.uid,
                  permission: change.permission?.rawValue, device: change.deviceID, grant: change.grantID,
                  message: change.message)
    }
}

extension ProblemDocument {
    public init(_ problem: EnforcementProblem) {
        self.init(kind: problem.kind.rawValue, node: problem.nodePath, user: problem.userName, uid: problem.uid,
                  permission: problem.permission?.rawValue, device: problem.deviceID, message: problem.message)
    }
}

extension DriftDocument {
    public init(_ item: DriftItem) {
        self.init(kind: item.kind.rawValue, node: item.nodePath, user: item.userName, uid: item.uid,
                  permission: item.permission.rawValue, device: item.deviceID, grant: item.grantID,
                  message: item.message)
    }
}

extension DecisionDocument {
    public init(_ outcome: Enforcer.DecisionOutcome, now: Date) {
        self.init(grant: GrantDocument(outcome.grant, now: now),
                  ended: outcome.ended.map { GrantDocument($0, now: now) },
                  report: EnforcementDocument(outcome.report, now: now))
    }
}

extension RevokeDocument {
    public init(_ outcome: Enforcer.RevokeOutcome, now: Date) {
        self.init(revoked: outcome.revoked.map { GrantDocument($0, now: now) },
                  stillCovering: outcome.stillCovering.map { GrantDocument($0, now: now) },
                  report: EnforcementDocument(outcome.report, now: now))
    }
}

extension ResetDocument {
    public init(_ outcome: Enforcer.ResetOutcome, subject: Principal, permission: Permission?, now: Date) {
        self.init(user: subject.name, uid: subject.uid, permission: permission?.rawValue,
                  deleted: outcome.deleted.map { GrantDocument($0, now: now) },
                  report: EnforcementDocument(outcome.report, now: now))
    }
}

extension AuditVerifyDocument {
    public init(_ verification: ChainVerification, ledger: String, anchor: ArchiveAnchor? = nil) {
        self.init(ledger: ledger, intact: verification.isIntact, message: verification.description)
        archivedThrough = anchor?.throughSeq
        anchorHash = anchor?.throughHash
        anchorEvent = anchor?.eventSeq
        switch verification {
        case .intact(let count):
            events = count
        case .broken(let chainBreak):
            brokenAt = chainBreak.seq
            kind = chainBreak.kind.rawValue
            explanation = chainBreak.explanation
        }
    }
}

extension ArchiveVerifyDocument {
    public init(_ verification: ArchiveVerification) {
        let (link, linkEvent, linkExplanation) = Self.link(verification.link)
        let range = "events \(verification.firstSeq)...\(verification.throughSeq)"
        let message: String
        if case .broken(let chainBreak) = verification.chain {
            message = "archive chain broken: \(chainBreak)"
        } else if let linkEvent, link == "anchored" {
            message = "archive intact: \(range), recorded by event \(linkEvent) of the ledger"
        } else {
            message = "archive chain intact (\(range)) but not linked to the ledger: \(linkExplanation ?? link)"
        }
        self.init(path: verification.path, intact: verification.isIntact, firstSeq: verification.firstSeq,
                  lastSeq: verification.throughSeq, lastHash: verification.throughHash, link: link, message: message)
        self.linkEvent = linkEvent
        self.linkExplanation = linkExplanation
        switch verification.chain {
        case .intact(let count): events = count
        case .broken(let chainBreak):
            brokenAt = chainBreak.seq
            kind = chainBreak.kind.rawValue
            explanation = chainBreak.explanation
        }
    }

    /// `anchored`, `mismatch` or `unrecorded`, the `archived` event, and why it does not link.
    private static func link(_ link: ArchiveLink) -> (String, Int64?, String?) {
        switch link {
        case .anchored(let seq): return ("anchored", seq, nil)
        case .mismatch(let seq, let text): return ("mismatch", seq, text)
        case .unrecorded(let text): return ("unrecorded", nil, text)
        }
    }
}

extension AuditArchiveDocument {
    public init(_ outcome: AuditArchiveOutcome, ledger: String) {
        let before = ISOTime.format(outcome.before)
        guard let anchor = outcome.anchor else {
            self.init(ledger: ledger, before: before, events: 0, vacuumed: outcome.vacuumed,
                      message: "no audit event is older than \(before): nothing was archived")
            ledgerBytesBefore = outcome.ledgerBytesBefore
            ledgerBytesAfter = outcome.ledgerBytesAfter
            return
        }
        var message = "archived \(anchor.events) events (\(anchor.firstSeq)...\(anchor.throughSeq)) older than "
            + "\(before) to \(anchor.archivePath); the ledger's chain continues from hash \(anchor.throughHash), "
            + "recorded by event \(anchor.eventSeq)"
        if let from = outcome.ledgerBytesBefore, let to = outcome.ledgerBytesAfter {
            message += "; ledger \(from / 1024) KiB -> \(to / 1024) KiB"
                + (outcome.vacuumed ? "" : " (not compacted: its free space is reused by new events)")
        }
        self.init(ledger: ledger, before: before, events: anchor.events, vacuumed: outcome.vacuumed, message: message)
        ledgerBytesBefore = outcome.ledgerBytesBefore
        ledgerBytesAfter = outcome.ledgerBytesAfter
        archive = anchor.archivePath
        firstSeq = anchor.firstSeq
        lastSeq = anchor.throughSeq
        anchorHash = anchor.throughHash
        anchorEvent = anchor.eventSeq
    }
}

extension WithdrawDocument {
    public init(_ request: PendingRequest) {
        self.init(pending: request.id, user: request.subject.name, uid: request.subject.uid,
                  permissions: request.permissions.map(\.rawValue),
                  resolution: request.resolution?.rawValue ?? "waiting")
    }
}

extension SwitchesDocument.State {
    public init(permission: Permission, off: PrivacySwitch?) {
        self.init(permission: permission.rawValue, state: off == nil ? "on" : "off")
        guard let off else { return }
        hard = off.hard
        by = off.by.name
        byUid = off.by.uid
        since = ISOTime.format(off.since)
        until = off.until.map(ISOTime.format)
        reason = off.reason.isEmpty ? nil : off.reason
        restricted = off.sentence(formatTime: ISOTime.format)
    }
}

extension SwitchesDocument {
    public init(switches off: [PrivacySwitch], changed: Bool? = nil, report: EnforcementReport? = nil,
                stillOpen: StillOpen? = nil, now: Date) {
        self.init(switches: Permission.all.map { permission in
                      State(permission: permission, off: off.first { $0.permission == permission })
                  },
                  changed: changed, enforcement: report.map { EnforcementDocument($0, now: now) }, stillOpen: stillOpen)
    }
}

extension AuditEventDocument {
    public init(_ record: RecordedAuditEvent) {
        let event = record.event
        self.init(seq: record.seq, timeUsec: Int64((event.time.timeIntervalSince1970 * 1_000_000).rounded()),
                  type: event.type.rawValue, details: event.details, prevHash: record.prevHash, hash: record.hash)
        actor = event.actor?.name
        actorUid = event.actor?.uid
        user = event.subject?.name
        uid = event.subject?.uid
        permission = event.permission?.rawValue
        device = event.deviceID
        deviceName = event.deviceName
        program = event.program
        node = event.nodePath
        if event.type == .decision || event.type == .grant {
            decision = event.details["decision"]
            how = event.details["how"]
        }
    }

    /// What the timeline reads of an event (`audit-report` with `timeline`): no hashes (empty)
    /// and no node; of the details only the keys the timeline reads.
    public init(timeline event: AuditTimelineEvent) {
        self.init(seq: event.seq, timeUsec: event.timeUsec, type: event.type, details: event.details, prevHash: "",
                  hash: "")
        actor = event.actor?.name
        actorUid = event.actor?.uid
        user = event.subject?.name
        uid = event.subject?.uid
        permission = event.permission
        device = event.deviceID
        program = event.program
        if event.type == AuditEventType.decision.rawValue || event.type == AuditEventType.grant.rawValue {
            decision = event.details["decision"]
            how = event.details["how"]
        }
    }
}
