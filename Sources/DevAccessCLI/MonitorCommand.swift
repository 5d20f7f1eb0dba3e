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
        var trackers: [Permission: HotplugTracker] = [:]
        for (_, permission) in watched {
            let status = StatusEvaluator.evaluate(MachineProbe.probeLocal(permission), for: user)
            current[permission] = status
            trackers[permission] = HotplugTracker(initial: status.devices.map(\.device))
        }
        if !json { console.error("devaccess: monitoring cameras and microphones for \(user.name); Ctrl-C stops") }
        while true {
            guard let received = try monitorNext(monitor) else { continue }
            let event = received.device
            guard let permission = watched.first(where: { $0.subsystem == event.subsystem })?.permission,
                  let before = current[permission], var tracker = trackers[permission] else { continue }
            let after = StatusEvaluator.evaluate(MachineProbe.probeLocal(permission), for: user)
            current[permission] = after
            let changes = tracker.apply(action: event.action ?? "change", devnode: event.devnode,
                                        probed: after.devices.map(\.device))
            trackers[permission] = tracker
            for change in changes {
                let document = MonitorEventDocument(
                    event: change.kind.rawValue, permission: permission.rawValue, id: change.device.id,
                    name: change.device.name, subsystem: event.subsystem, devnode: event.devnode,
                    seqnum: event.seqnum, kernelUsec: received.kernelArrivalMicroseconds,
                    monotonicUsec: MonotonicClock.microseconds(),
                    nodes: change.device.nodes.map { NodeDocument($0, access: nil) },
                    previousStatus: before.status.rawValue, status: after.status.rawValue)
                if json {
                    console.out(try JSONOutput.encodeLine(document))
                } else {
                    console.out("\(change.kind.rawValue) \(permission.rawValue) \(change.device.name) [\(change.device.id)] "
                        + "\(change.device.nodes.map(\.path).joined(separator: ",")): "
                        + "\(before.status.rawValue) -> \(after.status.rawValue)")
                }
            }
        }
    }

    private static func monitorNext(_ monitor: UdevMonitor) throws -> UdevMonitor.Event? {
        do {
            return try monitor.next(timeoutMilliseconds: -1)
        } catch {
            throw CommandFailure(message: error.description)
        }
    }
}
