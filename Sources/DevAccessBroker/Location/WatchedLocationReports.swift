import Synchronization
import DevAccessCore
import DevAccessHardware

/// Location's devices for status, request and run, from devaccessd's one gpsd watcher
/// (issue 27, finding 8): the same state `location` and the gpsd endpoint serve from, so a
/// slow gpsd cannot make `request location` say "unavailable" while `location` serves a
/// fix, and no second connection asks gpsd what the watcher already knows.
final class WatchedLocationReports: Sendable {
    let source: GpsdLocationSource
    /// Asks, as `nobody`, whether gpsd's port lets unprivileged programs in (the gate):
    /// a connection that sends nothing, made again at most every `gateLifetime`.
    let gate: GpsdClient
    /// How long a status waits for the watcher's first answer after starting it.
    let firstAnswer: Duration
    static let gateLifetime: Duration = .seconds(30)
    private let gateSeen = Mutex<(open: Bool, at: ContinuousClock.Instant)?>(nil)

    init(source: GpsdLocationSource, gate: GpsdClient, firstAnswer: Duration) {
        self.source = source
        self.gate = gate
        self.firstAnswer = firstAnswer
    }

    /// The report, as `LocationAdapter.probe` gives it, from the watcher's state.
    func report() -> AdapterReport {
        let state = answered(source.freshState())
        guard state.connected, state.listed, let release = state.release else {
            let problem = state.problem ?? "gpsd at \(source.watcher.endpoint) has not answered devaccessd's watch yet"
            return AdapterReport(permission: .location, devices: [], unavailableReason: problem)
        }
        let status = GpsdStatus(endpoint: state.endpoint, release: release, protocolMajor: 3, protocolMinor: 0,
                                receivers: state.receivers.map { Self.withFreshFix($0, state) })
        return LocationAdapter.report(for: status, openToAllLocalUsers: gateOpen())
    }

    /// The state once the watcher has answered (listed gpsd's devices or failed), waiting up
    /// to `firstAnswer` after starting it: the first status of a daemon's life.
    private func answered(_ state: GpsdWatchState) -> GpsdWatchState {
        source.start()
        var state = state
        let deadline = ContinuousClock.now.advanced(by: firstAnswer)
        while !(state.connected && state.listed), state.problem == nil, ContinuousClock.now < deadline {
            guard let next = source.watcher.waitForChange(after: state.generation,
                                                          timeout: deadline - ContinuousClock.now) else { break }
            state = source.fresh(next)
        }
        return state
    }

    /// A receiver whose fix went stale (`GpsdLocationSource.maxAge`) reports none.
    private static func withFreshFix(_ receiver: GpsdReceiver, _ state: GpsdWatchState) -> GpsdReceiver {
        var receiver = receiver
        if receiver.fix.mode.hasFix, !state.fixes.contains(where: { $0.device == receiver.path }) {
            receiver.fix = GpsdFix(mode: .notReported, latitude: nil, longitude: nil)
        }
        return receiver
    }

    /// Whether gpsd's port admits unprivileged programs, as last asked (an unanswered
    /// question counts as open, as `LocationAdapter.probe` takes it).
    private func gateOpen() -> Bool {
        let now = ContinuousClock.now
        if let seen = gateSeen.withLock({ $0 }), now - seen.at < Self.gateLifetime { return seen.open }
        let open = gate.admitsUnprivileged() ?? true
        gateSeen.withLock { $0 = (open, now) }
        return open
    }
}
