import DevAccessCore
import DevAccessHardware
import Glibc

enum MonitorCommand: Command {
    static let spec = CommandSpec(
        name: "monitor",
        abstract: "Print camera and microphone hotplug events and the status changes they cause.",
        usage: "devaccess monitor [--user USER] [--json]",
        options: [CommonOptions.user, CommonOptions.json],
        discussion: """
        Listens to udev (events after udevd applied its rules) for video4linux and sound
        devices. After each event the permission is probed again and the devices that
        appeared, went away or changed are printed, with the status before and after for
        USER. With --json, one object per line (docs/json.md). Runs until interrupted.
        Location is not monitored: gpsd receivers are not udev events of devaccess's.
        """)

    static let watched: [(subsystem: String, permission: Permission)] = [
        ("video4linux", .camera), ("sound", .microphone),
    ]

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if !arguments.positionals.isEmpty {
            throw UsageError(message: "unexpected argument '\(arguments.positionals[0])'", command: spec.name)
        }
        let user = try CommonOptions.identity(arguments, command: spec.name)
        let json = arguments.has("json")
        let monitor: UdevMonitor
        do {
            monitor = try UdevMonitor(subsystems: watched.map(\.subsystem))
        } catch {
            throw CommandFailure(message: error.description)
        }
        var current: [Permission: PermissionStatus] = [:]
        for (_, permission) in watched {
            current[permission] = StatusEvaluator.evaluate(MachineProbe.probeLocal(permission), for: user)
        }
        if !json { console.error("devaccess: monitoring cameras and microphones for \(user.name); Ctrl-C stops") }
        while true {
            guard let event = try monitorNext(monitor) else { continue }
            guard let permission = watched.first(where: { $0.subsystem == event.subsystem })?.permission,
                  let before = current[permission] else { continue }
            let after = StatusEvaluator.evaluate(MachineProbe.probeLocal(permission), for: user)
            current[permission] = after
            for change in DeviceDiff.changes(from: before, to: after) {
                let document = MonitorEventDocument(
                    event: change.kind, permission: permission.rawValue, id: change.device.id,
                    name: change.device.name, subsystem: event.subsystem, devnode: event.devnode,
                    seqnum: event.seqnum, monotonicUsec: monotonicMicroseconds(),
                    nodes: change.device.nodes.map { NodeDocument($0, access: nil) },
                    previousStatus: before.status.rawValue, status: after.status.rawValue)
                if json {
                    console.out(try JSONOutput.encodeLine(document))
                } else {
                    console.out("\(change.kind) \(permission.rawValue) \(change.device.name) [\(change.device.id)] "
                        + "\(change.device.nodes.map(\.path).joined(separator: ",")): "
                        + "\(before.status.rawValue) -> \(after.status.rawValue)")
                }
            }
        }
    }

    private static func monitorNext(_ monitor: UdevMonitor) throws -> UdevDevice? {
        do {
            return try monitor.next(timeoutMilliseconds: -1)
        } catch {
            throw CommandFailure(message: error.description)
        }
    }

    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}

/// Which devices appeared, went away or changed nodes between two probes.
enum DeviceDiff {
    struct Change {
        var kind: String
        var device: Device
    }

    static func changes(from before: PermissionStatus, to after: PermissionStatus) -> [Change] {
        let old = Dictionary(before.devices.map { ($0.device.id, $0.device) }, uniquingKeysWith: { a, _ in a })
        let new = Dictionary(after.devices.map { ($0.device.id, $0.device) }, uniquingKeysWith: { a, _ in a })
        var changes: [Change] = []
        for device in before.devices.map(\.device) where new[device.id] == nil {
            changes.append(Change(kind: "remove", device: device))
        }
        for device in after.devices.map(\.device) {
            guard let previous = old[device.id] else {
                changes.append(Change(kind: "add", device: device))
                continue
            }
            if previous.nodes.map(\.path) != device.nodes.map(\.path) || previous.nodes.map(\.facts) != device.nodes.map(\.facts) {
                changes.append(Change(kind: "change", device: device))
            }
        }
        return changes
    }
}
