import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessEngine
import DevAccessInterface
import DevAccessSystem

enum MonitorCommand: Command {
    static let spec = CommandSpec(
        name: "monitor",
        abstract: "Print the devices and their status now, then each change devaccessd reports, and location events.",
        usage: "devaccess monitor [--json] [--location HOST:PORT]",
        options: [CommonOptions.json, BrokerOptions.socket, locationOption],
        discussion: """
        Follows devaccessd's status updates for you (its 'subscribe', as the client library's
        status updates): nothing is probed or read here. First the current state: one line
        per camera and microphone device ('snapshot camera NAME [ID] NODES: STATUS'; a
        permission with no device gets one line too). Then each device that appeared, went
        away or changed (its nodes: owner, mode, ACL), with your status before and after it
        ('add camera NAME [ID] NODES: BEFORE -> AFTER'), and each status change without a
        device change (a grant, a revoke, an expiry, a policy change: 'status camera:
        BEFORE -> AFTER'). The status is the one 'devaccess status' gives, decisions, policy
        and privacy switches included. When devaccessd restarts, monitor subscribes again
        and prints what changed meanwhile. Without devaccessd there is no status to follow:
        monitor says so and exits 69 ('devaccess status' still works without it). With
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

    static let permissions: [Permission] = [.camera, .microphone]

    /// What the loop waits for: a status from the subscription, the switches' poll, its end.
    enum Input: Sendable {
        case status(PermissionStatus)
        case tick
        case ended
    }

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if !arguments.positionals.isEmpty {
            throw UsageError(message: "unexpected argument '\(arguments.positionals[0])'", command: spec.name)
        }
        let json = arguments.has("json")
        let socketPath = try BrokerOptions.socketPath(arguments, command: spec.name)
        // Status updates are devaccessd's alone (the engine in this process has none to
        // follow): monitor always goes to devaccessd, and without it exits 69.
        let access: any DevAccessInterface = BrokerInterface(socketPath: socketPath, timeout: .seconds(10))
        let snapshot = try await current(access)
        let broker: any DevAccessInterface = BrokerInterface(socketPath: socketPath, timeout: .seconds(2))
        var switches = await offSwitches(broker)
        var models: [Permission: HotplugStatusModel] = [:]
        for status in snapshot.permissions { models[status.permission] = HotplugStatusModel(snapshot: status) }
        let output = MonitorOutput(json: json, console: console)
        output.snapshot(snapshot.permissions)
        try printSwitches(switches ?? [], changedFrom: [], json: json, console: console)
        let location = try watchLocation(arguments, json: json, console: console)
        defer { location.stop() }
        if !json {
            console.error("devaccess: monitoring cameras, microphones and location for \(snapshot.user); Ctrl-C stops")
        }
        for await input in inputs(access) {
            switch input {
            case .status(let fresh):
                guard var model = models[fresh.permission] else { continue }
                let before = model.status
                let steps = model.update(fresh)
                models[fresh.permission] = model
                output.changes(steps, permission: fresh.permission, model: model, from: before)
            case .tick:
                // devaccessd not reachable (nil): the last known switches stay.
                guard let now = await offSwitches(broker), now != switches else { continue }
                try printSwitches(now, changedFrom: switches ?? [], json: json, console: console)
                switches = now
            case .ended:
                throw CommandFailure(message: "devaccessd ended the status updates (it refuses this subscription "
                                         + "for good); 'devaccess status' shows the status now", code: .brokerUnreachable)
            }
        }
        return .success
    }

    /// The statuses now; devaccessd not reachable: exit 69, saying what to do.
    static func current(_ access: any DevAccessInterface) async throws -> StatusReply {
        do throws(InterfaceError) {
            return try await access.status(StatusQuery(permissions: permissions))
        } catch .unreachable(let reason) {
            throw CommandFailure(message: "\(reason); monitor follows devaccessd's status updates: "
                                     + DaemonStart.advice() + ", or use 'devaccess status' for the status now",
                                 code: .brokerUnreachable)
        } catch {
            throw BrokerOptions.failure(error, command: spec.name)
        }
    }

    /// devaccessd's status updates (after a restart, every status again: only what changed
    /// prints), with a tick every 2 seconds for the switches.
    static func inputs(_ access: any DevAccessInterface) -> AsyncStream<Input> {
        AsyncStream(bufferingPolicy: .bufferingNewest(1024)) { continuation in
            let updates = Task {
                do throws(InterfaceError) {
                    for try await update in access.statusUpdates(SubscribeQuery(permissions: permissions)) {
                        for status in update.permissions { continuation.yield(.status(status)) }
                    }
                } catch {
                    // Refused for good: the same end as a stream that finished.
                }
                if !Task.isCancelled { continuation.yield(.ended) }
                continuation.finish()
            }
            let ticks = Task {
                while (try? await Task.sleep(for: .seconds(2))) != nil { continuation.yield(.tick) }
            }
            continuation.onTermination = { _ in
                updates.cancel()
                ticks.cancel()
            }
        }
    }

    /// Follows location through devaccessd's gpsd endpoint, printing each event from the
    /// watcher's thread (one line per write, so lines never interleave).
    private static func watchLocation(_ arguments: ParsedArguments, json: Bool, console: Console) throws -> LocationWatch {
        let watch: LocationWatch
        do {
            watch = try LocationWatch(endpoint: arguments.value("location") ?? "127.0.0.1:947")
        } catch {
            throw UsageError(message: "\(error) for '--location'", command: spec.name)
        }
        do {
            try watch.start { event in
                let document = switch event {
                case .unavailable(let problem): LocationEventDocument(event: "location-unavailable", problem: problem)
                case .receiverAdded(let path): LocationEventDocument(event: "receiver-add", device: path)
                case .receiverRemoved(let path): LocationEventDocument(event: "receiver-remove", device: path)
                case .fixChanged(let device, let from, let to):
                    LocationEventDocument(event: "fix", device: device, from: from, to: to)
                }
                if json {
                    if let line = try? JSONOutput.encodeLine(document) { console.out(line) }
                } else {
                    console.out(document.line)
                }
            }
        } catch {
            throw CommandFailure(message: error.description)
        }
        return watch
    }

    /// The switches that are off, as devaccessd says; nil when it cannot be asked.
    private static func offSwitches(_ broker: any DevAccessInterface) async -> [SwitchesDocument.State]? {
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

/// `monitor`'s lines: the snapshot, then one per device a status update added, removed or
/// changed, or one for the status alone when no device changed.
struct MonitorOutput {
    let json: Bool
    let console: Console

    /// One line per device of each permission, one for a permission without any.
    func snapshot(_ statuses: [PermissionStatus]) {
        let now = MonotonicClock.microseconds()
        for status in statuses {
            let head = [JSONMember("event", .string("snapshot")),
                        JSONMember("permission", .string(status.permission.rawValue)),
                        JSONMember("status", .string(status.status.rawValue))]
            if status.devices.isEmpty {
                let reason = status.reasons.first?.message
                print(.object(head + (reason.map { [JSONMember("reason", .string($0))] } ?? []) + tail(now)),
                      line: "snapshot \(status.permission.rawValue): \(status.status.rawValue)"
                          + (reason.map { " (" + TerminalText.field($0) + ")" } ?? ""))
                continue
            }
            for device in status.devices {
                print(.object(head + [JSONMember("device", ModelCoding.encode(device))] + tail(now)),
                      line: "snapshot \(status.permission.rawValue) \(Self.device(device.device)): \(status.status.rawValue)")
            }
        }
    }

    /// The lines of one status update: a line per device step, else one for a status change.
    func changes(_ steps: [HotplugStatusModel.Step], permission: Permission, model: HotplugStatusModel,
                 from before: AuthorizationStatus) {
        for step in steps {
            event(step, permission: permission, usable: model.lastRead(step.change.device.id)?.usable)
        }
        guard steps.isEmpty, before != model.status else { return }
        print(.object([JSONMember("event", .string("status")), JSONMember("permission", .string(permission.rawValue)),
                       JSONMember("previousStatus", .string(before.rawValue)),
                       JSONMember("status", .string(model.status.rawValue))] + tail(MonotonicClock.microseconds())),
              line: "status \(permission.rawValue): \(before.rawValue) -> \(model.status.rawValue)")
    }

    /// `device` is the device as the update left it: with `usable` unless it was removed;
    /// its nodes without an evaluation.
    private func event(_ step: HotplugStatusModel.Step, permission: Permission, usable: Bool?) {
        let device = step.change.device
        let encoded = switch (step.change.kind, usable) {
        case (.remove, _), (_, nil): ModelCoding.encode(device)
        case (_, let usable?):
            ModelCoding.encode(DeviceStatus(device: device, nodes: device.nodes.map { NodeStatus(node: $0, evaluation: nil) },
                                            usable: usable))
        }
        let members = [JSONMember("event", .string(step.change.kind.rawValue)),
                       JSONMember("permission", .string(permission.rawValue)),
                       JSONMember("device", encoded),
                       JSONMember("previousStatus", .string(step.previousStatus.rawValue)),
                       JSONMember("status", .string(step.status.rawValue))]
        print(.object(members + tail(MonotonicClock.microseconds())),
              line: "\(step.change.kind.rawValue) \(permission.rawValue) \(Self.device(device)): "
                  + "\(step.previousStatus.rawValue) -> \(step.status.rawValue)")
    }

    /// When the line was made (CLOCK_MONOTONIC µs).
    private func tail(_ monotonicUsec: UInt64) -> [JSONMember] {
        [JSONMember("monotonicUsec", .integer(Int64(clamping: monotonicUsec)))]
    }

    /// `NAME [ID] NODE,NODE`, each made safe for a terminal.
    static func device(_ device: Device) -> String {
        "\(TerminalText.field(device.name)) [\(TerminalText.field(device.id))] "
            + TerminalText.field(device.nodes.map(\.path).joined(separator: ","))
    }

    /// One JSON object a line (`--json`), or the text line.
    private func print(_ object: JSONValue, line: String) {
        console.out(json ? JSONWriter.string(object) : line)
    }
}
