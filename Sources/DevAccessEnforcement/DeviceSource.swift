import DevAccessCore
import DevAccessHardware

/// Where the engine learns which devices serve a permission and which nodes they have.
///
/// Only the enumeration is swappable: production asks udev and gpsd (`MachineDeviceSource`),
/// tests and the benchmark declare nodes they made with `mknod` (`DeclaredDeviceSource`).
/// Either way every node is examined for real and every ACL edit is real.
public protocol DeviceSource: Sendable {
    func report(for permission: Permission) -> AdapterReport
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
}
