import Foundation
import Synchronization
import DevAccessCore
import DevAccessHardware

/// Probes the hardware for status requests, fresh for every request yet shared by
/// requests that arrive together.
///
/// One worker thread per permission runs the adapter (udev, ALSA, gpsd: blocking work
/// that must not occupy the Swift concurrency pool or the event loop). A request joins
/// the batch waiting for the *next* probe, never one already running, so every answer
/// comes from a probe that started after the request arrived. Under load a probe
/// answers everyone who asked while the previous one ran; idle, each request gets its
/// own probe. A slow gpsd delays location answers only.
public final class FreshProbe: Sendable {
    public typealias Probe = @Sendable (Permission) -> AdapterReport

    private let workers: [Permission: Worker]
    private let probe: Probe

    /// `probe` runs one permission's adapter; the default asks the real hardware.
    public init(permissions: [Permission] = Permission.all, probe: @escaping Probe) {
        self.probe = probe
        var workers: [Permission: Worker] = [:]
        for permission in permissions {
            workers[permission] = Worker(permission: permission, probe: probe)
        }
        self.workers = workers
    }

    /// The real adapters: camera and microphone through udev, location through gpsd.
    public static func hardware(_ options: ProbeOptions) -> Probe {
        { permission in
            switch permission {
            case .camera, .microphone:
                return MachineProbe.probeLocal(permission)
            case .location:
                return LocationAdapter.probe(endpoint: options.gpsd, timeout: options.gpsdTimeout)
            default:
                return AdapterReport(permission: permission, devices: [],
                                     unavailableReason: "devaccess has no adapter for '\(permission.rawValue)'")
            }
        }
    }

    /// Reports for `permissions`, in that order, probed concurrently.
    public func reports(_ permissions: [Permission]) async -> [AdapterReport] {
        await withTaskGroup(of: (Int, AdapterReport).self) { group in
            for (index, permission) in permissions.enumerated() {
                group.addTask { (index, await self.report(permission)) }
            }
            var results = [AdapterReport?](repeating: nil, count: permissions.count)
            for await (index, report) in group { results[index] = report }
            return results.enumerated().map { index, report in
                report ?? AdapterReport(permission: permissions[index], devices: [], unavailableReason: "probe failed")
            }
        }
    }

    public func report(_ permission: Permission) async -> AdapterReport {
        guard let worker = workers[permission] else { return probe(permission) }
        return await worker.next()
    }

    final class Worker: Sendable {
        let permission: Permission
        private let probe: Probe
        private let waiting = Mutex<[CheckedContinuation<AdapterReport, Never>]>([])
        private let demand = DispatchSemaphore(value: 0)

        init(permission: Permission, probe: @escaping Probe) {
            self.permission = permission
            self.probe = probe
            let thread = Thread { [self] in self.loop() }
            thread.name = "devaccessd probe \(permission.rawValue)"
            thread.start()
        }

        func next() async -> AdapterReport {
            await withCheckedContinuation { continuation in
                let first = waiting.withLock { list -> Bool in
                    list.append(continuation)
                    return list.count == 1
                }
                if first { demand.signal() }
            }
        }

        private func loop() {
            while true {
                demand.wait()
                let batch = waiting.withLock { list -> [CheckedContinuation<AdapterReport, Never>] in
                    let taken = list
                    list.removeAll()
                    return taken
                }
                guard !batch.isEmpty else { continue }
                let report = probe(permission)
                for continuation in batch { continuation.resume(returning: report) }
            }
        }
    }
}
