import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation

/// The `--json` shapes of `list` and `reconcile` (docs/json.md). Keys without a value are
/// left out; times are UTC ISO 8601.
struct GrantListDocument: Encodable {
    var ledger: String
    var grants: [GrantDocument]
}

struct GrantDocument: Encodable {
    var id: Int64
    var user: String
    var uid: UInt32
    var permission: String
    var device: String?
    var program: String?
    var decision: String
    var scope: String
    var created: String
    var expires: String?
    var ended: String?
    var active: Bool
    var decidedBy: String
    var decidedByUid: UInt32
    var how: String
    var reason: String?

    init(_ grant: Grant, now: Date) {
        id = grant.id
        user = grant.subject.name
        uid = grant.subject.uid
        permission = grant.permission.rawValue
        device = grant.deviceID
        program = grant.program?.path
        decision = grant.decision.rawValue
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

struct EnforcementDocument: Encodable {
    var expired: [GrantDocument]
    var changes: [ChangeDocument]
    var problems: [ProblemDocument]
    var drift: [DriftDocument]
    var notes: [String]

    init(_ report: EnforcementReport, now: Date) {
        expired = report.expired.map { GrantDocument($0, now: now) }
        changes = report.changes.map(ChangeDocument.init)
        problems = report.problems.map(ProblemDocument.init)
        drift = report.drift.map(DriftDocument.init)
        notes = report.notes
    }
}

struct ChangeDocument: Encodable {
    var action: String
    var node: String
    var user: String
    var uid: UInt32
    var permission: String?
    var device: String
    var grant: Int64?
    var message: String

    init(_ change: EnforcementChange) {
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

struct ProblemDocument: Encodable {
    var kind: String
    var node: String
    var user: String
    var uid: UInt32
    var permission: String?
    var device: String?
    var message: String

    init(_ problem: EnforcementProblem) {
        kind = problem.kind.rawValue
        node = problem.nodePath
        user = problem.userName
        uid = problem.uid
        permission = problem.permission?.rawValue
        device = problem.deviceID
        message = problem.message
    }
}

struct DriftDocument: Encodable {
    var kind: String
    var node: String
    var user: String
    var uid: UInt32
    var permission: String
    var device: String
    var grant: Int64?
    var message: String

    init(_ item: DriftItem) {
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

/// Plain text for the admin commands: data lines on stdout, problems on stderr.
enum EnforcementText {
    /// "grant 12: allow camera for alice (1001) on every device, until 2026-12-01T18:00:00Z".
    static func grantLine(_ grant: Grant) -> String {
        "grant \(grant.id): \(grant.decision.rawValue) \(grant.permission.rawValue) for \(grant.subject) on "
            + (grant.deviceID.map { "device \($0)" } ?? "every device") + ", " + term(grant)
    }

    static func term(_ grant: Grant) -> String {
        grant.scope == .always ? "always" : grant.expires.map { "until \(ISOTime.format($0))" } ?? grant.scope.rawValue
    }

    /// Prints what changed, the drift and the notes; problems go to stderr. Returns
    /// `.failure` when a node was refused or an edit failed, else `.success`.
    static func print(_ report: EnforcementReport, console: Console, quietWhenUnchanged: Bool = false) -> ExitCode {
        var lines: [String] = []
        for grant in report.expired {
            lines.append("expired grant \(grant.id): \(grant.subject.name) \(grant.permission.rawValue) "
                + "(until \(grant.expires.map(ISOTime.format) ?? "?"))")
        }
        lines += report.changes.map(\.message)
        if report.changedNothing && !quietWhenUnchanged { lines.append("nothing to change") }
        lines += report.drift.map { "drift: \($0.message)" }
        lines += report.notes.map { "note: \($0)" }
        if !lines.isEmpty { console.out(lines.joined(separator: "\n")) }
        for problem in report.problems {
            console.error("devaccess: \(problem.kind.rawValue): \(problem.message)")
        }
        return report.problems.isEmpty ? .success : .failure
    }
}
