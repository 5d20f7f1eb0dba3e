import Synchronization
import DevAccessCore
import DevAccessHardware

/// The gpsd watcher as devaccessd's location source, and where status and request learn
/// location's devices (WatchedLocationReports). Started by the first question about location; a fix older than `maxAge` (a receiver that went quiet while gpsd stayed up) is
/// not served: a position that may be stale is worse than none.
final class GpsdLocationSource: LocationSource {
    let watcher: GpsdWatcher
    let log: BrokerLog
    /// Ten epochs of a 1 Hz receiver.
    static let maxAge: Duration = .seconds(10)
    private let started = Mutex(false)

    init(watcher: GpsdWatcher, log: BrokerLog) {
        self.watcher = watcher
        self.log = log
    }

    func start() {
        guard started.withLock({ started in defer { started = true }; return !started }) else { return }
        do {
            try watcher.start()
            log.info("watching gpsd", ["gpsd": watcher.endpoint.description])
        } catch {
            started.withLock { $0 = false }
            log.error("cannot watch gpsd", ["gpsd": watcher.endpoint.description, "error": error.description])
        }
    }

    func stop() {
        watcher.stop()
    }

    func currentFix() -> LocationFix? {
        fresh(watcher.snapshot()).bestFix
    }

    func snapshot() -> LocationSnapshot {
        let state = fresh(watcher.snapshot())
        return LocationSnapshot(generation: state.generation, release: state.release,
                                receivers: state.receivers.map {
                                    LocationSnapshot.Receiver(path: $0.path, driver: $0.driver, activated: $0.activated)
                                },
                                fixes: state.fixes, sky: state.sky)
    }

    func observeChanges(_ body: @escaping @Sendable () -> Void) -> LocationObservation {
        let observation = watcher.observeChanges(body)
        return LocationObservation { [watcher] in watcher.cancel(observation) }
    }

    func problem() -> String {
        let state = watcher.snapshot()
        let gpsd = "gpsd at \(watcher.endpoint)"
        guard state.connected else {
            return state.problem.map { "no position: \($0)" } ?? "no position: not connected to \(gpsd) yet"
        }
        guard !state.receivers.isEmpty else { return "no position: \(gpsd) has no receiver" }
        let fresh = self.fresh(state)
        let modes = state.receivers.map { receiver -> String in
            guard let fix = fresh.fixes.first(where: { $0.device == receiver.path }) else {
                return "\(receiver.path): nothing heard for \(Self.maxAge.components.seconds) s"
            }
            return "\(receiver.path): " + (fix.mode >= 2 ? "a fix" : "no fix yet")
        }
        return "no position: no receiver of \(gpsd) has a fix (" + modes.joined(separator: "; ") + ")"
    }

    /// The watcher's state now, without stale fixes.
    func freshState() -> GpsdWatchState {
        fresh(watcher.snapshot())
    }

    /// The state without fixes older than `maxAge`.
    func fresh(_ state: GpsdWatchState) -> GpsdWatchState {
        var state = state
        let now = ContinuousClock.now
        state.fixes = state.fixes.filter { fix in
            guard let device = fix.device, let received = state.fixReceived[device] else { return true }
            return now - received <= Self.maxAge
        }
        return state
    }
}
