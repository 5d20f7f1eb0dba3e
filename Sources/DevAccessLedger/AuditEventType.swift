/// The kind of an audit event. A struct over its stored name (like `Permission`) so a
/// ledger written by a newer devaccess with new kinds still reads.
///
/// Each kind has a fixed journal `MESSAGE_ID` (128 bits, as `journalctl MESSAGE_ID=...`
/// and catalog files expect). These values are an interface: never change one.
///
/// | type | MESSAGE_ID |
/// |---|---|
/// | request | 086cbd6eccaf45fbaa8ce3fd7be5464e |
/// | decision | 3591b7cc18bb4386b4ce543a3089bd2b |
/// | grant | d43e2fef14f342fbaf29c4e9b2d33e16 |
/// | revoke | 59c31f28135e47ae896c077c6061598a |
/// | reset | ccd3ec28880a45b8a176868c91259135 |
/// | expiry | 42615b47b5544dfb997ebd9f19dff961 |
/// | acl_add | b83a27cfbed945dd9c9093ee2f8650d7 |
/// | acl_remove | 605fe02fd1f549ea834e7fae482bb873 |
/// | drift_seen | dbf8d88ab0aa444e8f9917d0caab04c7 |
/// | drift_repaired | 1dd150f8888a45048e681625182014b3 |
/// | hotplug | b51375d2d5ef432eac4ab8f137fd0fc8 |
/// | run_start | 55d9f1240c6d435e862aedc6911e474c |
/// | run_end | 3e009e8105e64ded8b2a3780b001bd31 |
/// | refused | c73c55d2205a4888b21977ba96c45b35 |
/// | approval_queued | e1a011708e254c07a9e750a851c0ccf8 |
/// | archived | 0b966baa54e94c0d924bf8055acb9e32 |
/// | switch_off | 6f1c2d0a9b7e4c38a5d14e2f7b90c3a1 |
/// | switch_on | 2a8e5b7c1d3f4a60b9e2c7d4f15a8e36 |
/// | (any other) | b95fe832b30444da90797d1cb0c07840 |
public struct AuditEventType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A subject asked for a permission.
    public static let request = AuditEventType(rawValue: "request")
    /// A decision answering a request (consent, auth_self, policy).
    public static let decision = AuditEventType(rawValue: "decision")
    /// An administrator decided directly (`devaccess grant`, approve).
    public static let grant = AuditEventType(rawValue: "grant")
    public static let revoke = AuditEventType(rawValue: "revoke")
    /// Decisions of a user were forgotten.
    public static let reset = AuditEventType(rawValue: "reset")
    public static let expiry = AuditEventType(rawValue: "expiry")
    public static let aclAdd = AuditEventType(rawValue: "acl_add")
    public static let aclRemove = AuditEventType(rawValue: "acl_remove")
    public static let driftSeen = AuditEventType(rawValue: "drift_seen")
    public static let driftRepaired = AuditEventType(rawValue: "drift_repaired")
    public static let hotplug = AuditEventType(rawValue: "hotplug")
    public static let runStart = AuditEventType(rawValue: "run_start")
    public static let runEnd = AuditEventType(rawValue: "run_end")
    /// Something was refused: a bad request, a planted node, a non-admin asking for admin work.
    public static let refused = AuditEventType(rawValue: "refused")
    public static let approvalQueued = AuditEventType(rawValue: "approval_queued")
    /// Old events were moved to an archive file; the details say which and the hashes at
    /// both ends (`ArchiveAnchor`).
    public static let archived = AuditEventType(rawValue: "archived")
    /// A permission was switched off for everyone (a privacy switch), or one of its nodes'
    /// access was saved and taken away (`node_path` set).
    public static let switchOff = AuditEventType(rawValue: "switch_off")
    /// A privacy switch was turned back on (by an admin or its `--for` running out), or a
    /// node's saved access was put back (`node_path` set).
    public static let switchOn = AuditEventType(rawValue: "switch_on")
    /// devaccessd opened a device node for a granted caller and passed it the descriptor
    /// (`open`).
    public static let deviceOpen = AuditEventType(rawValue: "device_open")

    public static let known: [AuditEventType] = [
        .request, .decision, .grant, .revoke, .reset, .expiry, .aclAdd, .aclRemove, .driftSeen,
        .driftRepaired, .hotplug, .runStart, .runEnd, .refused, .approvalQueued, .archived, .switchOff, .switchOn,
        .deviceOpen,
    ]

    /// The journal MESSAGE_ID of this kind (32 lowercase hex digits).
    public var messageID: String {
        switch rawValue {
        case "request": return "086cbd6eccaf45fbaa8ce3fd7be5464e"
        case "decision": return "3591b7cc18bb4386b4ce543a3089bd2b"
        case "grant": return "d43e2fef14f342fbaf29c4e9b2d33e16"
        case "revoke": return "59c31f28135e47ae896c077c6061598a"
        case "reset": return "ccd3ec28880a45b8a176868c91259135"
        case "expiry": return "42615b47b5544dfb997ebd9f19dff961"
        case "acl_add": return "b83a27cfbed945dd9c9093ee2f8650d7"
        case "acl_remove": return "605fe02fd1f549ea834e7fae482bb873"
        case "drift_seen": return "dbf8d88ab0aa444e8f9917d0caab04c7"
        case "drift_repaired": return "1dd150f8888a45048e681625182014b3"
        case "hotplug": return "b51375d2d5ef432eac4ab8f137fd0fc8"
        case "run_start": return "55d9f1240c6d435e862aedc6911e474c"
        case "run_end": return "3e009e8105e64ded8b2a3780b001bd31"
        case "refused": return "c73c55d2205a4888b21977ba96c45b35"
        case "approval_queued": return "e1a011708e254c07a9e750a851c0ccf8"
        case "archived": return "0b966baa54e94c0d924bf8055acb9e32"
        case "switch_off": return "6f1c2d0a9b7e4c38a5d14e2f7b90c3a1"
        case "switch_on": return "2a8e5b7c1d3f4a60b9e2c7d4f15a8e36"
        case "device_open": return "7c4e1b9a2f6d4e8b9a3c5d7e1f2b4a68"
        default: return "b95fe832b30444da90797d1cb0c07840"
        }
    }

    /// syslog priority for the journal: warnings for what an admin should look at.
    var journalPriority: Int {
        switch rawValue {
        case "drift_seen", "refused": return 4
        case "revoke", "reset", "drift_repaired", "archived", "switch_off", "switch_on": return 5
        default: return 6
        }
    }

    public var description: String { rawValue }
}
