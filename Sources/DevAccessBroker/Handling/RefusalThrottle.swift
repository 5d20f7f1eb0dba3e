import Synchronization

/// Keeps one user's refused requests from filling the audit trail (and the disk): at
/// most `burst` refusals of a uid are written per `window`; the rest are counted, and the
/// uid's next refusal that is written after the window says how many were left out. Every
/// refused request is still answered `permission-denied`.
final class RefusalThrottle: Sendable {
    enum Verdict: Sendable, Hashable {
        /// Write it; `leftOut` refusals of this uid were not written before it.
        case record(leftOut: Int)
        /// Count it only.
        case skip
    }

    private struct Window {
        var start: ContinuousClock.Instant
        var recorded: Int
        var leftOut: Int
    }

    let burst: Int
    let window: Duration
    private let windows = Mutex<[UInt32: Window]>([:])

    init(burst: Int = 20, window: Duration = .seconds(60)) {
        self.burst = max(1, burst)
        self.window = window
    }

    func admit(_ uid: UInt32, now: ContinuousClock.Instant = .now) -> Verdict {
        windows.withLock { windows in
            // A uid that stopped being refused long ago needs no window (bounded memory).
            if windows.count > 10_000 { windows = windows.filter { now - $0.value.start < window } }
            guard var current = windows[uid], now - current.start < window else {
                let carried = windows[uid]?.leftOut ?? 0
                windows[uid] = Window(start: now, recorded: 1, leftOut: 0)
                return .record(leftOut: carried)
            }
            if current.recorded < burst {
                current.recorded += 1
                windows[uid] = current
                return .record(leftOut: 0)
            }
            current.leftOut += 1
            windows[uid] = current
            return .skip
        }
    }
}
