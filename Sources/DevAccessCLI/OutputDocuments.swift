import DevAccessCore
import DevAccessHardware
import DevAccessInterface
import DevAccessEnforcement

/// The stable `--json` shapes (docs/json.md). Keys that have no value are left out.
struct StatusDocument: Encodable {
    var user: String
    var uid: UInt32
    var permissions: [PermissionDocument]
    /// Who opens capture nodes without devaccess (local `status` of camera or microphone).
    var gate: GateDocument?
}

/// `GateReport` as JSON (docs/json.md, "gate").
struct GateDocument: Encodable {
    struct Rules: Encodable {
        var file: String
        var installed: String?
        var active: Bool?
        var message: String
    }

    struct Opener: Encodable {
        var kind: String
        var name: String?
        var members: [String]?
        var access: String
        var devaccess: Bool?
        var message: String
    }

    struct Node: Encodable {
        var node: String
        var permission: String
        var device: String
        var without: [Opener]
    }

    var effective: Bool
    var summary: String
    var denyByDefault: Rules
    var nodes: [Node]

    init(_ report: GateReport) {
        effective = report.isEffective
        summary = report.summary
        denyByDefault = Rules(file: DenyByDefaultRules.fileName, installed: report.denyByDefault.installed,
                              active: report.denyByDefault.active, message: report.denyByDefault.message)
        nodes = report.nodes.map { node in
            Node(node: node.path, permission: node.permission.rawValue, device: node.deviceID,
                 without: node.openers.map {
                     Opener(kind: $0.kind.rawValue, name: $0.name.isEmpty ? nil : $0.name, members: $0.members,
                            access: $0.access.word, devaccess: $0.devaccess, message: $0.message)
                 })
        }
    }
}

struct PermissionDocument: Encodable {
    var permission: String
    var status: String
    var accuracy: String?
    var devices: [DeviceDocument]
    var reasons: [Reason]
    var drift: [Reason]

    init(_ status: PermissionStatus) {
        accuracy = status.accuracy?.rawValue
        permission = status.permission.rawValue
        self.status = status.status.rawValue
        devices = status.devices.map { DeviceDocument($0.device, usable: $0.usable, nodes: $0.nodes) }
        reasons = status.reasons
        drift = status.drift
    }
}

struct DevicesDocument: Encodable {
    var permissions: [InventoryDocument]
}

struct InventoryDocument: Encodable {
    var permission: String
    var unavailableReason: String?
    var devices: [DeviceDocument]
    var notes: [Reason]

    init(_ report: AdapterReport) {
        permission = report.permission.rawValue
        unavailableReason = report.unavailableReason
        devices = report.devices.map { DeviceDocument($0, usable: nil, nodes: nil) }
        notes = report.notes
    }
}

struct DeviceDocument: Encodable {
    var id: String
    var name: String
    var driver: String?
    var bus: String?
    var usable: Bool?
    var service: ServiceDocument?
    var details: [String: String]
    var nodes: [NodeDocument]

    init(_ device: Device, usable: Bool?, nodes statuses: [NodeStatus]?) {
        id = device.id
        name = device.name
        driver = device.driver
        bus = device.bus
        self.usable = usable
        if case .service(let access) = device.route {
            service = ServiceDocument(name: access.name, endpoint: access.endpoint,
                                      openToAllLocalUsers: access.openToAllLocalUsers)
        }
        details = device.details
        if let statuses {
            nodes = statuses.map { NodeDocument($0.node, access: $0.evaluation?.access ?? AccessMode.none) }
        } else {
            nodes = device.nodes.map { NodeDocument($0, access: nil) }
        }
    }
}

struct ServiceDocument: Encodable {
    var name: String
    var endpoint: String
    var openToAllLocalUsers: Bool
}

struct NodeDocument: Encodable {
    var path: String
    var role: String
    var required: String
    var type: String?
    var major: UInt32?
    var minor: UInt32?
    var mode: String?
    var owner: String?
    var group: String?
    var acl: [String]?
    var access: String?
    var problem: String?

    init(_ node: DeviceNode, access: AccessMode?) {
        path = node.path
        role = node.role
        required = node.required.word
        switch node.state {
        case .present(let facts):
            type = facts.kind.rawValue
            major = facts.major
            minor = facts.minor
            mode = facts.modeOctal
            owner = facts.ownerName ?? String(facts.ownerUID)
            group = facts.groupName ?? String(facts.groupGID)
            acl = facts.acl?.map(\.text) ?? []
            self.access = access?.word
        case .unusable(let why):
            problem = why
            self.access = access?.word
        }
    }
}

/// One line of `devaccess monitor --json`.
/// `monitor --json`'s location events.
struct LocationEventDocument: Encodable {
    var event: String
    var permission = "location"
    var device: String?
    var from: String?
    var to: String?
    var problem: String?
    var monotonicUsec = MonotonicClock.microseconds()

    init(event: String, device: String? = nil, from: String? = nil, to: String? = nil, problem: String? = nil) {
        self.event = event
        self.device = device
        self.from = from
        self.to = to
        self.problem = problem
    }

    /// `add location receiver /dev/ttyACM0`, `fix location /dev/ttyACM0: none -> 3d`, `location: ...`.
    var line: String {
        let path = TerminalText.field(device ?? "?")
        switch event {
        case "receiver-add": return "add location receiver \(path)"
        case "receiver-remove": return "remove location receiver \(path)"
        case "fix": return "fix location \(path): \(from ?? "?") -> \(to ?? "?")"
        default: return "location: " + TerminalText.field(problem ?? "unavailable")
        }
    }
}

struct MonitorEventDocument: Encodable {
    var event: String
    var permission: String
    var id: String
    var name: String
    var subsystem: String?
    var devnode: String?
    var seqnum: UInt64
    /// When devaccess received the kernel's uevent of that SEQNUM (CLOCK_MONOTONIC µs).
    var kernelUsec: UInt64?
    var monotonicUsec: UInt64
    var nodes: [NodeDocument]
    /// The user can use the device (as last read); absent for `remove`.
    var usable: Bool?
    var previousStatus: String
    var status: String
    /// Why the ledger's decisions are not in the status (devaccessd not reachable).
    var decisionsUnknown: String?
}

/// `monitor --json`'s first lines: one per device present when it started listening, one
/// without `id` for a permission with no device.
struct MonitorSnapshotDocument: Encodable {
    var event = "snapshot"
    var permission: String
    var id: String?
    var name: String?
    var nodes: [NodeDocument]?
    var usable: Bool?
    var status: String
    /// For a permission without devices: why it is unavailable.
    var reason: String?
    var decisionsUnknown: String?
    var monotonicUsec: UInt64
}

/// `monitor --json`: a privacy switch changed (`event` is "switch").
struct SwitchEventDocument: Encodable {
    var event = "switch"
    var permission: String
    var state: String
    var hard: Bool?
    var by: String?
    var since: String?
    var until: String?
    var reason: String?

    init(_ state: SwitchesDocument.State) {
        permission = state.permission
        self.state = state.state
        hard = state.hard
        by = state.by
        since = state.since
        until = state.until
        reason = state.reason
    }
}
