import DevAccessCore

/// The watcher's state and how each of gpsd's reports changes it, without I/O: the
/// rules (which receiver a TPV belongs to, when a fix is dropped, which change is an
/// event) live here and are tested with scripted reports.
struct GpsdWatchModel: Sendable {
    /// gpsd handles 4 devices unless built otherwise; receivers beyond this many are
    /// ignored, so a peer inventing paths cannot grow the state without bound.
    static let maxReceivers = 32

    private(set) var state: GpsdWatchState
    private var fixByPath: [String: LocationFix] = [:]

    init(endpoint: GpsdEndpoint) {
        state = GpsdWatchState(endpoint: endpoint)
    }

    /// gpsd's banner came on a new connection.
    mutating func connected(_ version: GpsdReport.Version) -> [GpsdWatchEvent] {
        change { model in
            model.forgetReceivers()
            model.state.connected = true
            model.state.problem = nil
            model.state.release = version.release
            return [.connected(release: version.release)]
        }
    }

    /// The connection ended, or could not be made, because of `problem`: everything it
    /// told us goes with it.
    mutating func disconnected(_ problem: String) -> [GpsdWatchEvent] {
        change { model in
            var events: [GpsdWatchEvent] = []
            if model.state.connected || model.state.problem != problem { events.append(.disconnected(problem: problem)) }
            events += model.forgetReceivers().map { .receiverRemoved(path: $0) }
            model.state.connected = false
            model.state.problem = problem
            model.state.release = nil
            return events
        }
    }

    /// One report from the current connection; `line` is the report as it came, kept for SKY.
    mutating func apply(_ report: GpsdReport, line: [UInt8], at now: ContinuousClock.Instant) -> [GpsdWatchEvent] {
        change { model in
            switch report {
            case .devices(let devices):
                return model.list(devices)
            case .device(let device):
                return model.update(device)
            case .tpv(let tpv):
                return model.record(tpv, at: now)
            case .poll(let tpvs):
                return tpvs.flatMap { model.record($0, at: now) }
            case .sky(let device):
                if let path = model.receiverPath(device) {
                    model.state.sky[path] = String(decoding: line, as: UTF8.self)
                }
                return []
            case .version, .error, .other:
                return []
            }
        }
    }

    // MARK: Rules

    /// DEVICES is the whole list: receivers not in it are gone.
    private mutating func list(_ devices: [GpsdReport.Device]) -> [GpsdWatchEvent] {
        var events: [GpsdWatchEvent] = []
        var listed: [GpsdReceiver] = []
        for device in devices {
            guard let path = device.path, !path.isEmpty, !listed.contains(where: { $0.path == path }),
                  listed.count < Self.maxReceivers else { continue }
            var receiver = state.receivers.first { $0.path == path } ?? GpsdReceiver(path: path)
            if !state.receivers.contains(where: { $0.path == path }) { events.append(.receiverAdded(path: path)) }
            receiver.driver = device.driver ?? receiver.driver
            receiver.activated = device.activated?.text
            listed.append(receiver)
        }
        for receiver in state.receivers where !listed.contains(where: { $0.path == receiver.path }) {
            forget(receiver.path)
            events.append(.receiverRemoved(path: receiver.path))
        }
        state.receivers = listed
        state.listed = true
        return events
    }

    /// DEVICE: a receiver opened or identified (added or updated), or closed
    /// (`activated` 0), which gpsd sends when it lets go of it: the receiver is gone.
    private mutating func update(_ device: GpsdReport.Device) -> [GpsdWatchEvent] {
        guard let path = device.path, !path.isEmpty else { return [] }
        let index = state.receivers.firstIndex { $0.path == path }
        if let activated = device.activated, activated.text == nil {
            guard let index else { return [] }
            state.receivers.remove(at: index)
            forget(path)
            return [.receiverRemoved(path: path)]
        }
        guard let index else {
            guard state.receivers.count < Self.maxReceivers else { return [] }
            state.receivers.append(GpsdReceiver(path: path, driver: device.driver, activated: device.activated?.text))
            return [.receiverAdded(path: path)]
        }
        if let driver = device.driver { state.receivers[index].driver = driver }
        if let activated = device.activated?.text { state.receivers[index].activated = activated }
        return []
    }

    /// TPV: the receiver's new fix. Mode 0 ("no data yet") never replaces a fix already
    /// taken; TPVs of receivers gpsd has not listed are ignored.
    private mutating func record(_ tpv: GpsdReport.TPV, at now: ContinuousClock.Instant) -> [GpsdWatchEvent] {
        guard let path = receiverPath(tpv.device), let index = state.receivers.firstIndex(where: { $0.path == path }),
              let mode = GpsdFixMode(rawValue: tpv.mode) else { return [] }
        let previous = state.receivers[index].fix.mode
        if mode == .notReported && previous != .notReported { return [] }
        let fix = tpv.fix(device: path)
        fixByPath[path] = fix
        state.fixReceived[path] = now
        state.receivers[index].fix = GpsdFix(mode: mode, latitude: fix.latitude, longitude: fix.longitude)
        return previous.word == mode.word ? [] : [.fixModeChanged(device: path, from: previous, to: mode)]
    }

    /// A report's receiver: the one it names, or the only one when it names none.
    private func receiverPath(_ device: String?) -> String? {
        if let device { return state.receivers.contains { $0.path == device } ? device : nil }
        return state.receivers.count == 1 ? state.receivers[0].path : nil
    }

    private mutating func forget(_ path: String) {
        fixByPath[path] = nil
        state.fixReceived[path] = nil
        state.sky[path] = nil
    }

    /// Drops every receiver and what it reported; returns their paths.
    @discardableResult
    private mutating func forgetReceivers() -> [String] {
        let paths = state.receivers.map(\.path)
        state.receivers = []
        state.listed = false
        fixByPath = [:]
        state.fixReceived = [:]
        state.sky = [:]
        return paths
    }

    /// Runs `body`, derives `fixes` from the receivers, and bumps the generation when
    /// anything changed.
    private mutating func change(_ body: (inout GpsdWatchModel) -> [GpsdWatchEvent]) -> [GpsdWatchEvent] {
        let before = state
        let events = body(&self)
        state.fixes = state.receivers.compactMap { fixByPath[$0.path] }
        if state != before { state.generation = before.generation &+ 1 }
        return events
    }
}
