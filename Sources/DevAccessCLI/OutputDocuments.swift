import DevAccessCore

/// The stable `--json` shapes (docs/json.md). Keys that have no value are left out.
struct StatusDocument: Encodable {
    var user: String
    var uid: UInt32
    var permissions: [PermissionDocument]
}

struct PermissionDocument: Encodable {
    var permission: String
    var status: String
    var devices: [DeviceDocument]
    var reasons: [Reason]
    var drift: [Reason]

    init(_ status: PermissionStatus) {
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
    var previousStatus: String
    var status: String
}
