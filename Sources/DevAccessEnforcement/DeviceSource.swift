import DevAccessCore
import DevAccessHardware

/// Where the engine learns which devices serve a permission and which nodes they have.
///
/// Only the enumeration is swappable: production asks udev and gpsd (`MachineDeviceSource`),
/// tests and the benchmark declare nodes they made with `mknod` (`DeclaredDeviceSource`).
/// Either way every node is examined for real and every ACL edit is real.
public protocol DeviceSource: Sendable {
    func report(for permission: Permission) -> AdapterReport
    /// The devices with a node at one of `paths` (see the extension below).
    func report(for permission: Permission, nodes paths: Set<String>) -> AdapterReport
}

/// The machine's devices: udev for camera and microphone, gpsd for location.
public struct MachineDeviceSource: DeviceSource {
    public var probeOptions: ProbeOptions

    public init(probeOptions: ProbeOptions = ProbeOptions()) {
        self.probeOptions = probeOptions
    }

    public func report(for permission: Permission) -> AdapterReport {
        if permission == .location {
            return LocationAdapter.probe(endpoint: probeOptions.gpsd, timeout: probeOptions.gpsdTimeout)
        }
        // Enforcement runs on every hotplug and timer tick: classify from udev, do not wake cameras.
        return MachineProbe.probeLocal(permission, openNodes: false)
    }

    /// A hotplug event's devices. Cameras: udev's `video*` nodes, classified from udev
    /// without opening a node (every camera is needed, not only the event's: ids shared by
    /// two cameras are made unique from all of them; the other video4linux nodes can never
    /// be cameras). Microphones: the cards of the named sound nodes only.
    public func report(for permission: Permission, nodes paths: Set<String>) -> AdapterReport {
        var report: AdapterReport
        switch permission {
        case .camera:
            report = MachineProbe.probeLocal(.camera, openNodes: false, videoNodesOnly: true)
        case .microphone:
            let cards = Set(paths.compactMap(MicrophoneAdapter.cardNumber(ofNode:)))
            guard !cards.isEmpty else { return AdapterReport(permission: .microphone, devices: []) }
            report = MachineProbe.probeLocal(.microphone, openNodes: false, soundCards: cards)
        default:
            // Location has no nodes devaccess gates.
            return AdapterReport(permission: permission, devices: [])
        }
        report.devices = report.devices.filter { $0.nodes.contains { paths.contains($0.path) } }
        return report
    }
}

/// The nodes a udev event (or a declared node's directory event) named: an engine pass
/// limited to them applies the ledger to the devices those nodes belong to, and to nothing
/// else (`Enforcer.applyNodes`).
public struct NodeSelection: Sendable, Hashable {
    /// Node paths as udev names them (`/dev/video0`); a path that is no device's node
    /// selects nothing.
    public var paths: Set<String>
    /// The permissions whose devices may own those nodes (from the event's subsystem);
    /// nil: every node-gated permission.
    public var permissions: Set<Permission>?

    public init(paths: Set<String>, permissions: Set<Permission>? = nil) {
        self.paths = paths
        self.permissions = permissions
    }
}

extension DeviceSource {
    /// The devices of `permission` that have a node at one of `paths`, each with all of its
    /// nodes (a microphone's capture PCM and its card's control node). This default probes
    /// everything and filters; a source that can find one device more cheaply says so.
    public func report(for permission: Permission, nodes paths: Set<String>) -> AdapterReport {
        var report = report(for: permission)
        report.devices = report.devices.filter { $0.nodes.contains { paths.contains($0.path) } }
        return report
    }
}
