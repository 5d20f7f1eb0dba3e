import DevAccessCore

/// Where the location adapter finds gpsd and how long it may wait.
public struct ProbeOptions: Sendable {
    public var gpsd: GpsdEndpoint
    public var gpsdTimeout: Duration

    public init(gpsd: GpsdEndpoint = .default, gpsdTimeout: Duration = .milliseconds(500)) {
        self.gpsd = gpsd
        self.gpsdTimeout = gpsdTimeout
    }
}

/// Runs the authority adapter of each requested permission. Location talks to
/// gpsd over the network, so it runs beside the udev-based probes, not after them.
public enum MachineProbe {
    public static func probe(_ permissions: [Permission], options: ProbeOptions = ProbeOptions()) async -> [AdapterReport] {
        async let location: AdapterReport? = permissions.contains(.location)
            ? Task.detached { LocationAdapter.probe(endpoint: options.gpsd, timeout: options.gpsdTimeout) }.value
            : nil
        var local: [Permission: AdapterReport] = [:]
        let udevPermissions = permissions.filter { $0 == .camera || $0 == .microphone }
        if !udevPermissions.isEmpty {
            for permission in udevPermissions {
                local[permission] = probeLocal(permission)
            }
        }
        if let report = await location { local[.location] = report }
        return permissions.map { local[$0] ?? AdapterReport(permission: $0, devices: [],
            unavailableReason: "devaccess has no adapter for '\($0.rawValue)'") }
    }

    /// One udev-based permission, synchronously (the monitor re-probes with this).
    /// `openNodes: false` for frequent runs (enforcement): classify from udev where it can.
    /// `soundCards`: only those cards' microphones (a hotplug event's card), not every card's.
    /// `videoNodesOnly`: cameras from udev's `video*` nodes only (`CameraAdapter.probe`).
    public static func probeLocal(_ permission: Permission, openNodes: Bool = true,
                                  soundCards: Set<Int>? = nil, videoNodesOnly: Bool = false) -> AdapterReport {
        let udev: Udev
        do {
            udev = try Udev()
        } catch {
            return AdapterReport(permission: permission, devices: [], unavailableReason: error.description)
        }
        switch permission {
        case .camera: return CameraAdapter.probe(udev: udev, openNodes: openNodes, videoNodesOnly: videoNodesOnly)
        case .microphone: return MicrophoneAdapter.probe(udev: udev, cards: soundCards)
        default:
            return AdapterReport(permission: permission, devices: [],
                                 unavailableReason: "'\(permission.rawValue)' is not probed through udev")
        }
    }
}
