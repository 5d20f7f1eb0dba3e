/// One piece of hardware that serves a permission, with its stable id and nodes.
public struct Device: Sendable, Hashable {
    public var permission: Permission
    /// Survives reboots and replugs: built from udev's ID_PATH / ID_SERIAL, the ALSA
    /// card's path, or the receiver's path at gpsd; sysfs-derived only as a last resort.
    public var id: String
    public var name: String
    public var driver: String?
    public var bus: String?
    public var nodes: [DeviceNode]
    public var route: AccessRoute
    /// Adapter-specific facts shown to people (fix mode, card id, capabilities).
    public var details: [String: String]

    public init(permission: Permission, id: String, name: String, driver: String? = nil, bus: String? = nil,
                nodes: [DeviceNode], route: AccessRoute = .nodes, details: [String: String] = [:]) {
        self.permission = permission
        self.id = id
        self.name = name
        self.driver = driver
        self.bus = bus
        self.nodes = nodes
        self.route = route
        self.details = details
    }
}

/// How a subject reaches the device: by opening its nodes, or through a service
/// (gpsd) that reads the hardware for its clients.
public enum AccessRoute: Sendable, Hashable {
    case nodes
    case service(ServiceAccess)
}

public struct ServiceAccess: Sendable, Hashable {
    public var name: String
    public var endpoint: String
    /// True when every local user may talk to the service (gpsd's default).
    public var openToAllLocalUsers: Bool

    public init(name: String, endpoint: String, openToAllLocalUsers: Bool) {
        self.name = name
        self.endpoint = endpoint
        self.openToAllLocalUsers = openToAllLocalUsers
    }
}

/// One device node and the access a program needs on it to use the device.
public struct DeviceNode: Sendable, Hashable {
    public var path: String
    /// What the node is for: `capture`, `control`, `receiver`.
    public var role: String
    public var required: AccessMode
    public var state: State

    public enum State: Sendable, Hashable {
        case present(NodeFacts)
        /// The node could not be examined (vanished, not a device node, ...).
        case unusable(String)
    }

    public init(path: String, role: String, required: AccessMode, state: State) {
        self.path = path
        self.role = role
        self.required = required
        self.state = state
    }

    public var facts: NodeFacts? {
        if case .present(let facts) = state { return facts }
        return nil
    }
}

/// What an authority adapter found for one permission.
public struct AdapterReport: Sendable, Hashable {
    public var permission: Permission
    public var devices: [Device]
    /// Set when the permission cannot be served at all (no service, probe failed).
    public var unavailableReason: String?
    /// Facts worth telling: nodes skipped and why, probes that fell back.
    public var notes: [Reason]

    public init(permission: Permission, devices: [Device], unavailableReason: String? = nil, notes: [Reason] = []) {
        self.permission = permission
        self.devices = devices
        self.unavailableReason = unavailableReason
        self.notes = notes
    }
}
