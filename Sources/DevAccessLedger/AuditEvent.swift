import FoundationEssentials
import Glibc
import DevAccessCore

/// One thing that happened, enriched at write time with names so it reads on its own
/// years later, after users, programs and devices are gone.
public struct AuditEvent: Sendable, Hashable {
    public var type: AuditEventType
    public var time: Date
    /// Who caused it (the requester, the admin, root for the broker's own work).
    public var actor: Principal?
    /// Whose access it concerns.
    public var subject: Principal?
    public var permission: Permission?
    public var deviceID: String?
    public var deviceName: String?
    public var program: String?
    public var nodePath: String?
    /// Anything else, stored as JSON with sorted keys.
    public var details: [String: String]

    public init(type: AuditEventType, time: Date = Date(), actor: Principal? = nil, subject: Principal? = nil,
                permission: Permission? = nil, deviceID: String? = nil, deviceName: String? = nil,
                program: String? = nil, nodePath: String? = nil, details: [String: String] = [:]) {
        self.type = type
        self.time = time
        self.actor = actor
        self.subject = subject
        self.permission = permission
        self.deviceID = deviceID
        self.deviceName = deviceName
        self.program = program
        self.nodePath = nodePath
        self.details = details
    }
}

/// An event as stored: its place in the chain and its hashes.
public struct RecordedAuditEvent: Sendable, Hashable {
    public var seq: Int64
    /// The event with `time` rounded to the stored microsecond.
    public var event: AuditEvent
    /// The stored details text, exactly as hashed.
    public var detailsJSON: String
    public var prevHash: String
    public var hash: String

    public init(seq: Int64, event: AuditEvent, detailsJSON: String, prevHash: String, hash: String) {
        self.seq = seq
        self.event = event
        self.detailsJSON = detailsJSON
        self.prevHash = prevHash
        self.hash = hash
    }
}
