import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessHardware
import DevAccessInterface
import Glibc

enum MonitorCommand: Command {
    static let spec = CommandSpec(
        name: "monitor",
        abstract: "Print hotplug events, location receivers and fixes, and the status changes they cause.",
        usage: "devaccess monitor [--user USER] [--json] [--location HOST:PORT]",
        options: [CommonOptions.user, CommonOptions.json, BrokerOptions.socket, locationOption],
        discussion: """
        Listens to udev (events after udevd applied its rules) for video4linux and sound
        devices. After each event the permission is probed again and the devices that
        appeared, went away or changed are printed, with the status before and after for
        USER. With --json, one object per line (docs/json.md). Runs until interrupted.
        Location comes from devaccessd's gpsd endpoint (--location, default 127.0.0.1:947),
        at your grant: a receiver added or removed ('add location receiver PATH'), a fix
        gained, lost or changed between 2D and 3D ('fix location PATH: none -> 3d'), and why
        nothing comes ('location: ...': no grant, devaccessd not serving it); it reconnects
        by itself.
        Privacy switches ('devaccess switch') are asked of devaccessd at the start and every
        2 seconds: a change prints 'switch PERMISSION off|on' (JSON: event "switch"), and a
        permission switched off shows as restricted.
        """)

    static let locationOption = OptionSpec(long: "location", short: nil, value: "HOST:PORT",
        help: "devaccessd's gpsd endpoint to follow location at (default 127.0.0.1:947).")

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
        let broker = BrokerInterface(socketPath: try BrokerOptions.socketPath(arguments, command: spec.name),
                                     timeout: .seconds(2))
        var switches = await offSwitches(broker)
        func evaluate(_ permission: Permission) -> PermissionStatus {
            let off = switches?.first { $0.permission == permission.rawValue }
            return StatusEvaluator.evaluate(MachineProbe.probeLocal(permission), for: user,
                                            inputs: DecisionInputs(policyRestriction: off.flatMap(\.restricted).map {
                                                Reason(.ledger, $0)
                                            }))
        }
        try printSwitches(switches ?? [], changedFrom: [], json: json, console: console)
        var current: [Permission: PermissionStatus] = [:]
        var trackers: [Permission: HotplugTracker] = [:]
        for (_, permission) in watched {
            let status = evaluate(permission)
            current[permission] = status
            trackers[permission] = HotplugTracker(initial: status.devices.map(\.device))
        }
        let location = try watchLocation(arguments, json: json, console: console)
        defer { location.stop() }
        if !json {
            console.error("devaccess: monitoring cameras, microphones and location for \(user.name); Ctrl-C stops")
        }
        while true {
            let next = try monitorNext(monitor)
            // devaccessd not reachable (nil): the last known switches stay.
            if let now = await offSwitches(broker), now != switches {
                try printSwitches(now, changedFrom: switches ?? [], json: json, console: console)
                switches = now
                for (_, permission) in watched { current[permission] = evaluate(permission) }
            }
            guard let received = next else { continue }
            let event = received.device
            guard let permission = watched.first(where: { $0.subsystem == event.subsystem })?.permission,
                  let before = current[permission], var tracker = trackers[permission] else { continue }
            let after = evaluate(permission)
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

    /// Follows location through devaccessd's gpsd endpoint, printing each event from the
    /// watcher's thread (one line per write, so lines never interleave).
    private static func watchLocation(_ arguments: ParsedArguments, json: Bool, console: Console) throws -> GpsdWatcher {
        let endpoint: GpsdEndpoint
        do {
            endpoint = try GpsdEndpoint(parsing: arguments.value("location") ?? "127.0.0.1:947")
        } catch {
            throw UsageError(message: "\(error) for '--location'", command: spec.name)
        }
        let watcher = GpsdWatcher(endpoint: endpoint)
        watcher.setChangeHandler { event in
            let document: LocationEventDocument
            switch event {
            case .connected: return
            case .disconnected(let problem):
                document = LocationEventDocument(event: "location-unavailable", problem: problem)
            case .receiverAdded(let path):
                document = LocationEventDocument(event: "receiver-add", device: path)
            case .receiverRemoved(let path):
                document = LocationEventDocument(event: "receiver-remove", device: path)
            case .fixModeChanged(let device, let from, let to):
                document = LocationEventDocument(event: "fix", device: device, from: from.word, to: to.word)
            }
            if json {
                if let line = try? JSONOutput.encodeLine(document) { console.out(line) }
            } else {
                console.out(document.line)
            }
        }
        do {
            try watcher.start()
        } catch {
            throw CommandFailure(message: error.description)
        }
        return watcher
    }

    /// The switches that are off, as devaccessd says; nil when it cannot be asked.
    private static func offSwitches(_ broker: BrokerInterface) async -> [SwitchesDocument.State]? {
        guard let document = try? await broker.switches() else { return nil }
        return document.switches.filter { $0.state == "off" }
    }

    /// One line (or JSON object) per switch that changed since `changedFrom`.
    private static func printSwitches(_ off: [SwitchesDocument.State], changedFrom earlier: [SwitchesDocument.State],
                                      json: Bool, console: Console) throws {
        var changed = off.filter { !earlier.contains($0) }
        for gone in earlier where !off.contains(where: { $0.permission == gone.permission }) {
            changed.append(SwitchesDocument.State(permission: Permission(rawValue: gone.permission), off: nil))
        }
        for state in changed {
            if json {
                console.out(try JSONOutput.encodeLine(SwitchEventDocument(state)))
            } else {
                console.out("switch " + SwitchCommand.line(state))
            }
        }
    }

    private static func monitorNext(_ monitor: UdevMonitor) throws -> UdevMonitor.Event? {
        do {
            return try monitor.next(timeoutMilliseconds: 2000)
        } catch {
            throw CommandFailure(message: error.description)
        }
    }
}
