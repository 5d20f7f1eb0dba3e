import FoundationEssentials
import Glibc
import DevAccessCore

extension GrantTerm {
    /// A request's term in audit details: `scope`, its word (`default`: none named, the
    /// policy's Keep= applies), and `duration_sec` with `for`.
    public static func auditDetails(_ term: GrantTerm?) -> [String: String] {
        var details = ["scope": term?.word.rawValue ?? "default"]
        if let seconds = term?.seconds { details["duration_sec"] = String(seconds) }
        return details
    }
}

/// How a pending request ended.
public enum PendingResolution: String, Sendable, Hashable, CaseIterable {
    case approved
    case rejected
    /// Nothing left to decide (e.g. the user was granted or denied otherwise meanwhile).
    case withdrawn
    /// An administrator said no to this request only: no decision recorded, the next
    /// request is queued again (`reject` without `--deny`).
    case declined
}

/// A request to queue for an administrator (policy auth_admin).
public struct NewPendingRequest: Sendable, Hashable {
    public var subject: Principal
    /// The requesting program (/proc/PID/exe of the peer), when known.
    public var program: String?
    /// Non-empty, no duplicates.
    public var permissions: [Permission]
    /// As asked; nil: the policy's Keep= at approval, else once. The policy that applies
    /// (Keep=, MaxDuration=) is read when an administrator approves.
    public var scope: GrantTerm?
    public var reason: String
    /// The process that asked, for an approval `once` (the grant lasts while it runs).
    public var holder: ProcessHolder?
    /// The location accuracy asked for (with location among `permissions` only); an
    /// approval grants this level, under the policy's cap then.
    public var accuracy: LocationAccuracy?

    public init(subject: Principal, program: String? = nil, permissions: [Permission], scope: GrantTerm? = nil,
                reason: String = "", holder: ProcessHolder? = nil, accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.holder = holder
        self.subject = subject
        self.program = program
        self.permissions = permissions
        self.scope = scope
        self.reason = reason
    }
}

/// A queued request as stored.
public struct PendingRequest: Sendable, Hashable, Identifiable {
    public var id: Int64
    public var subject: Principal
    public var program: String?
    public var permissions: [Permission]
    public var scope: GrantTerm?
    public var reason: String
    public var created: Date
    /// nil while it waits.
    public var resolution: PendingResolution?
    public var resolved: Date?
    public var resolvedBy: Principal?
    /// The process that asked (for an approval `once`); nil for requests queued before it was kept.
    public var holder: ProcessHolder?
    /// The location accuracy asked for; nil without location, or queued before levels
    /// existed (exact, `locationLevel`).
    public var accuracy: LocationAccuracy?

    public init(id: Int64, subject: Principal, program: String?, permissions: [Permission], scope: GrantTerm?,
                reason: String, created: Date, resolution: PendingResolution? = nil, resolved: Date? = nil,
                resolvedBy: Principal? = nil, holder: ProcessHolder? = nil, accuracy: LocationAccuracy? = nil) {
        self.accuracy = accuracy
        self.holder = holder
        self.id = id
        self.subject = subject
        self.program = program
        self.permissions = permissions
        self.scope = scope
        self.reason = reason
        self.created = created
        self.resolution = resolution
        self.resolved = resolved
        self.resolvedBy = resolvedBy
    }

    public var isWaiting: Bool { resolution == nil }

    /// The location level an approval grants (exact when none was kept); nil without location.
    public var locationLevel: LocationAccuracy? {
        permissions.contains(.location) ? accuracy ?? .exact : nil
    }
}
