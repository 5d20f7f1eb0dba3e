import DevAccessCore
import DevAccessHardware

/// Probes the hardware for status requests: one `Coalescer` (and thread) per
/// permission, so every answer comes from a probe that started after the request
/// arrived, requests arriving together share one, and a slow gpsd delays location
/// answers only.
public final class FreshProbe: Sendable {
    public typealias Probe = @Sendable (Permission) -> AdapterReport

    private let coalescers: [Permission: Coalescer<AdapterReport>]
    /// The adapters themselves, uncoalesced (the enforcement engine's device source).
    let probe: Probe

    /// `probe` runs one permission's adapter; `hardware(_:)` asks the real hardware.
    public init(permissions: [Permission] = Permission.all, probe: @escaping Probe) {
        self.probe = probe
        var coalescers: [Permission: Coalescer<AdapterReport>] = [:]
        for permission in permissions {
            coalescers[permission] = Coalescer(name: "devaccessd probe \(permission.rawValue)") { probe(permission) }
        }
        self.coalescers = coalescers
    }

    /// The real adapters: camera and microphone through udev, location through gpsd.
    public static func hardware(_ options: ProbeOptions) -> Probe {
        { permission in
            switch permission {
            case .camera, .microphone:
                return MachineProbe.probeLocal(permission, openNodes: false)
            case .location:
                return LocationAdapter.probe(endpoint: options.gpsd, timeout: options.gpsdTimeout)
            default:
                return AdapterReport(permission: permission, devices: [],
                                     unavailableReason: "devaccess has no adapter for '\(permission.rawValue)'")
            }
        }
    }

    /// Calls `deliver` with the next report for `permission` (from the probe thread).
    func request(_ permission: Permission, _ deliver: @escaping @Sendable (AdapterReport) -> Void) {
        guard let coalescer = coalescers[permission] else {
            deliver(probe(permission))
            return
        }
        coalescer.request(deliver)
    }

    public func report(_ permission: Permission) async -> AdapterReport {
        await withCheckedContinuation { continuation in
            request(permission) { continuation.resume(returning: $0) }
        }
    }

    /// Reports for `permissions`, in that order, probed side by side.
    public func reports(_ permissions: [Permission]) async -> [AdapterReport] {
        await withCheckedContinuation { continuation in
            let gather = Gather<AdapterReport>(count: permissions.count) { continuation.resume(returning: $0) }
            for (index, permission) in permissions.enumerated() {
                request(permission) { gather.deliver(index, $0) }
            }
        }
    }
}
