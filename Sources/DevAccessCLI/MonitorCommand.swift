import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessHardware
import DevAccessEnforcement
import DevAccessInterface
import DevAccessProtocol
import Glibc
import DevAccessEngine

enum MonitorCommand: Command {
    static let spec = CommandSpec(
        name: "monitor",
        abstract: "Print the devices and their status now, then hotplug and location events and the status changes they cause.",
        usage: "devaccess monitor [--user USER] [--json] [--location HOST:PORT]",
        options: [CommonOptions.user, CommonOptions.json, BrokerOptions.socket, CommonOptions.stateDir, locationOption],
        discussion: """
        Listens to udev (events after udevd applied its rules) for video4linux and sound
        devices. First, once it listens, it prints the current state: one line per camera and
        microphone device ('snapshot camera NAME [ID] NODES: STATUS'; a permission with no
        device gets one line too), so a script that has read a line knows no later event is
        missed. Then each device that appeared, went away or changed, with USER's status
        before and after that event ('add camera NAME [ID] NODES: BEFORE -> AFTER').
        Which devices an event adds or removes comes from the event itself (its action and
        device node, the device's own capture node); the status is read after each batch of
        events from the same source as 'devaccess status': the ledger and the policy when you
        may read them (root), devaccessd otherwise, so a standing denial shows as denied and a
        policy restriction or a privacy switch as restricted. When devaccessd cannot be
        reached, the status comes from the nodes and the policy alone: lines end with
        '(decisions unknown)' (JSON: "decisionsUnknown"). Another user's status (--user) only
        for root and members of devaccess-admin, as for status (exit 77 otherwise). With
        --json, one object per line (docs/json.md). Runs until interrupted.
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

    /// Events read at once after the first of a batch, before the status is read again.
    static let batchLimit = 256

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if !arguments.positionals.isEmpty {
            throw UsageError(message: "unexpected argument '\(arguments.positionals[0])'", command: spec.name)
        }
        // Refused before anything is opened when the caller may not see USER's status.
        _ = try LocalStatus.identity(arguments, command: spec.name)
        let json = arguments.has("json")
        // Listening first: every event after the snapshot's reading is queued on the socket.
        let events = try MonitorEvents.open(subsystems: watched.map(\.subsystem), environment: arguments.environment)
        let permissions = watched.map(\.permission)
        let broker = BrokerInterface(socketPath: try BrokerOptions.socketPath(arguments, command: spec.name),
                                     timeout: .seconds(2))
        var output = MonitorOutput(json: json, console: console)
        var switches = await offSwitches(broker)
        let snapshot = try await read(permissions, arguments)
        var models: [Permission: HotplugStatusModel] = [:]
        for status in snapshot.statuses {
            models[status.permission] = HotplugStatusModel(snapshot: status)
        }
        try output.snapshot(snapshot)
        try printSwitches(switches ?? [], changedFrom: [], json: json, console: console)
        let location = try watchLocation(arguments, json: json, console: console)
        defer { location.stop() }
        if !json {
            console.error("devaccess: monitoring cameras, microphones and location for \(snapshot.user.name); Ctrl-C stops")
        }
        while true {
            let first = try events.next(timeoutMilliseconds: 2000)
            // devaccessd not reachable (nil): the last known switches stay.
            if let now = await offSwitches(broker), now != switches {
                try printSwitches(now, changedFrom: switches ?? [], json: json, console: console)
                switches = now
                let reading = try await read(permissions, arguments)
                for status in reading.statuses { models[status.permission]?.read(status) }
                output.decisionsUnknown = reading.decisionsUnknown
            }
            guard let first else { continue }
            var batch = [first]
            while batch.count < batchLimit, let more = try events.next(timeoutMilliseconds: 0) { batch.append(more) }
            let touched = permissions.filter { permission in
                batch.contains { permissionOf($0) == permission }
            }
            guard !touched.isEmpty else { continue }
            // One reading for the batch, taken after all of its events; each event's status
            // is that reading narrowed to the devices the events so far brought.
            let reading = try await read(touched, arguments)
            for status in reading.statuses { models[status.permission]?.read(status) }
            for event in batch {
                guard let permission = permissionOf(event), var model = models[permission] else { continue }
                let steps = model.apply(action: event.action, devnode: event.devnode)
                models[permission] = model
                for step in steps {
                    try output.event(step, permission: permission, uevent: event,
                                     usable: model.lastRead(step.change.device.id)?.usable,
                                     decisionsUnknown: reading.decisionsUnknown)
                }
            }
        }
    }

    static func permissionOf(_ event: MonitorUevent) -> Permission? {
        watched.first { $0.subsystem == event.subsystem }?.permission
    }

    /// The statuses as `devaccess status` reads them: the ledger and policy here when the
    /// caller may read the ledger, devaccessd otherwise (nodes and policy alone when it
    /// cannot be reached: `decisionsUnknown` says why).
    struct Reading {
        var user: UserIdentity
        var statuses: [PermissionStatus]
        var decisionsUnknown: String?
    }

    static func read(_ permissions: [Permission], _ arguments: ParsedArguments) async throws -> Reading {
        let computed = try await LocalStatus.compute(permissions, arguments, command: spec.name)
        var unknown: String?
        if case .unknown(let why)? = computed.ledger { unknown = why }
        return Reading(user: computed.user, statuses: computed.statuses, decisionsUnknown: unknown)
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
                console.out(try JSONOutput.encodeLine(SwitchEvent(state: state)))
            } else {
                console.out("switch " + SwitchCommand.line(state))
            }
        }
    }
}

/// `monitor`'s lines: the snapshot, then one per device an event added, removed or changed.
struct MonitorOutput {
    let json: Bool
    let console: Console
    /// Why the decisions are not known (devaccessd not reachable), said once on stderr in text.
    var decisionsUnknown: String? {
        didSet {
            guard !json, decisionsUnknown != oldValue else { return }
            if let why = decisionsUnknown {
                console.error("devaccess: decisions unknown: \(TerminalText.field(why)); statuses come from the nodes "
                              + "and the policy alone until devaccessd answers")
            } else {
                console.error("devaccess: decisions known again: devaccessd answers")
            }
        }
    }

    init(json: Bool, console: Console) {
        self.json = json
        self.console = console
    }

    /// One line per device of each permission, one for a permission without any.
    mutating func snapshot(_ reading: MonitorCommand.Reading) throws {
        decisionsUnknown = reading.decisionsUnknown
        let now = MonotonicClock.microseconds()
        for status in reading.statuses {
            let head = [JSONMember("event", .string("snapshot")),
                        JSONMember("permission", .string(status.permission.rawValue)),
                        JSONMember("status", .string(status.status.rawValue))]
            if status.devices.isEmpty {
                let reason = status.reasons.first?.message
                print(.object(head + (reason.map { [JSONMember("reason", .string($0))] } ?? [])
                              + tail(reading.decisionsUnknown, monotonicUsec: now)),
                      line: "snapshot \(status.permission.rawValue): \(status.status.rawValue)"
                          + (reason.map { " (" + TerminalText.field($0) + ")" } ?? ""))
                continue
            }
            for device in status.devices {
                print(.object(head + [JSONMember("device", ModelCoding.encode(device))]
                              + tail(reading.decisionsUnknown, monotonicUsec: now)),
                      line: "snapshot \(status.permission.rawValue) \(Self.device(device.device)): \(status.status.rawValue)")
            }
        }
    }

    /// `device` is the device as the event left it: with `usable` (the last reading) unless it
    /// was removed; its nodes without an evaluation (the event does not read access).
    mutating func event(_ step: HotplugStatusModel.Step, permission: Permission, uevent: MonitorUevent, usable: Bool?,
                        decisionsUnknown: String?) throws {
        self.decisionsUnknown = decisionsUnknown
        let device = step.change.device
        let encoded = switch (step.change.kind, usable) {
        case (.remove, _), (_, nil): ModelCoding.encode(device)
        case (_, let usable?):
            ModelCoding.encode(DeviceStatus(device: device, nodes: device.nodes.map { NodeStatus(node: $0, evaluation: nil) },
                                            usable: usable))
        }
        var members = [JSONMember("event", .string(step.change.kind.rawValue)),
                       JSONMember("permission", .string(permission.rawValue)),
                       JSONMember("device", encoded)]
        if let subsystem = uevent.subsystem { members.append(JSONMember("subsystem", .string(subsystem))) }
        if let devnode = uevent.devnode { members.append(JSONMember("devnode", .string(devnode))) }
        members.append(JSONMember("seqnum", .integer(Int64(clamping: uevent.seqnum))))
        if let kernelUsec = uevent.kernelUsec { members.append(JSONMember("kernelUsec", .integer(Int64(clamping: kernelUsec)))) }
        members += [JSONMember("previousStatus", .string(step.previousStatus.rawValue)),
                    JSONMember("status", .string(step.status.rawValue))]
        print(.object(members + tail(decisionsUnknown, monotonicUsec: MonotonicClock.microseconds())),
              line: "\(step.change.kind.rawValue) \(permission.rawValue) \(Self.device(device)): "
                  + "\(step.previousStatus.rawValue) -> \(step.status.rawValue)")
    }

    /// Why decisions are unknown (when they are), then when the line was made (CLOCK_MONOTONIC µs).
    private func tail(_ decisionsUnknown: String?, monotonicUsec: UInt64) -> [JSONMember] {
        (decisionsUnknown.map { [JSONMember("decisionsUnknown", .string($0))] } ?? [])
            + [JSONMember("monotonicUsec", .integer(Int64(clamping: monotonicUsec)))]
    }

    /// `NAME [ID] NODE,NODE`, each made safe for a terminal.
    static func device(_ device: Device) -> String {
        "\(TerminalText.field(device.name)) [\(TerminalText.field(device.id))] "
            + TerminalText.field(device.nodes.map(\.path).joined(separator: ","))
    }

    /// One JSON object a line (`--json`), or the text line.
    private func print(_ object: JSONValue, line: String) {
        if json {
            console.out(JSONWriter.string(object))
        } else {
            console.out(line + (decisionsUnknown == nil ? "" : " (decisions unknown)"))
        }
    }
}
