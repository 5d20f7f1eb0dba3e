import FoundationEssentials
import Glibc
import DevAccessCore

/// A user as recorded: uid plus the name it resolved to when the record was written.
public struct Principal: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var name: String

    public init(uid: UInt32, name: String) {
        self.uid = uid
        self.name = name
    }

    public var description: String { "\(name) (\(uid))" }
}

/// The program a grant is limited to: its canonical path and, when the admin pins it,
/// the SHA-256 of the executable (lowercase hex).
public struct Program: Sendable, Hashable {
    public var path: String
    public var sha256: String?

    public init(path: String, sha256: String? = nil) {
        self.path = path
        self.sha256 = sha256
    }
}

public enum Decision: String, Sendable, Hashable, CaseIterable {
    case allow, deny
}

/// The process a `once` grant lasts for: while it runs, the grant stands; when it exits
/// (or cannot be shown to be the same process: a reused pid, another boot) the grant ends.
public struct ProcessHolder: Sendable, Hashable, CustomStringConvertible {
    public var pid: Int32
    /// Clock ticks after boot at which it started (/proc/PID/stat field 22).
    public var startTicks: UInt64
    /// /proc/sys/kernel/random/boot_id of the boot it ran in.
    public var bootID: String

    public init(pid: Int32, startTicks: UInt64, bootID: String) {
        self.pid = pid
        self.startTicks = startTicks
        self.bootID = bootID
    }

    public var description: String { "pid \(pid)" }
}

/// How long a recorded decision holds is a `GrantTerm.Word`: one `devaccess run` or (with a
/// holder) while the process that asked runs (`once`), until `expires` (`for`), or until
/// revoked (`always`). The ledger's `scope` column and its audit details spell `for` as
/// `until` (the grant documents and the wire say `for`, with `expires`): a recorded `for`
/// counts from the moment it is written, so the row keeps the time it ends, not how long it was.
extension GrantTerm.Word {
    public var recordedName: String {
        switch self {
        case .once: return "once"
        case .duration: return "until"
        case .always: return "always"
        }
    }

    public init?(recordedName: String) {
        guard let word = Self.allCases.first(where: { $0.recordedName == recordedName }) else { return nil }
        self = word
    }
}

extension ResolvedTerm {
    /// The ledger's scope and expiry for this term recorded at `now`: a `for` ends `seconds`
    /// later, a `once` at its cap at the latest.
    public func recorded(at now: Date) -> (scope: GrantTerm.Word, expires: Date?) {
        switch term {
        case .once: return (.once, cap.map { now.addingTimeInterval(TimeInterval($0)) })
        case .duration(let seconds): return (.duration, now.addingTimeInterval(TimeInterval(seconds)))
        case .always: return (.always, nil)
        }
    }
}

/// A decision to record.
public struct NewGrant: Sendable, Hashable {
    public var subject: Principal
    public var program: Program?
    public var permission: Permission
    /// nil: every device of the permission.
    public var deviceID: String?
    public var decision: Decision
    public var scope: GrantTerm.Word
    /// Required for `.duration`, refused for `.always`, optional for `.once` (a safety stop).
    public var expires: Date?
    public var decidedBy: Principal
    public var method: DecisionMethod
    public var reason: String
    /// `once` for a request: the process whose lifetime the grant lasts.
    public var holder: ProcessHolder?
    /// Location only: how precisely the user is told where the machine is; nil for the
    /// other permissions (the ledger refuses a level on them) and for a denial.
    public var accuracy: LocationAccuracy?

    public init(subject: Principal, program: Program? = nil, permission: Permission, deviceID: String? = nil,
                decision: Decision, scope: GrantTerm.Word, expires: Date? = nil,
                decidedBy: Principal, method: DecisionMethod, reason: String = "", holder: ProcessHolder? = nil,
                accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.holder = holder
        self.subject = subject
        self.program = program
        self.permission = permission
        self.deviceID = deviceID
        self.decision = decision
        self.scope = scope
        self.expires = expires
        self.decidedBy = decidedBy
        self.method = method
        self.reason = reason
    }
}

/// A decision as stored in the ledger.
public struct Grant: Sendable, Hashable, Identifiable {
    public var id: Int64
    public var subject: Principal
    public var program: Program?
    public var permission: Permission
    public var deviceID: String?
    public var decision: Decision
    public var scope: GrantTerm.Word
    public var created: Date
    public var expires: Date?
    /// When it was revoked or marked expired; nil while it stands.
    public var revoked: Date?
    public var decidedBy: Principal
    public var method: DecisionMethod
    public var reason: String
    /// A `once` grant of a request: the process it lasts for (nil for every other grant).
    public var holder: ProcessHolder?
    /// Location: the level granted. nil: not a location grant, or a location grant recorded
    /// before levels existed, which is exact (`locationLevel`).
    public var accuracy: LocationAccuracy?

    public init(id: Int64, subject: Principal, program: Program? = nil, permission: Permission, deviceID: String? = nil,
                decision: Decision, scope: GrantTerm.Word, created: Date, expires: Date? = nil, revoked: Date? = nil,
                decidedBy: Principal, method: DecisionMethod, reason: String = "", holder: ProcessHolder? = nil,
                accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.holder = holder
        self.id = id
        self.subject = subject
        self.program = program
        self.permission = permission
        self.deviceID = deviceID
        self.decision = decision
        self.scope = scope
        self.created = created
        self.expires = expires
        self.revoked = revoked
        self.decidedBy = decidedBy
        self.method = method
        self.reason = reason
    }

    /// The level a location allow gives (a row without one is exact); nil for anything else.
    public var locationLevel: LocationAccuracy? {
        guard permission == .location, decision == .allow else { return nil }
        return accuracy ?? .exact
    }

    /// Neither revoked nor past its expiry at `now`.
    public func isActive(at now: Date) -> Bool {
        revoked == nil && (expires.map { $0 > now } ?? true)
    }
}
