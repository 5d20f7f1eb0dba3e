import Synchronization

/// A budget per uid over a window: at most `burst` units a uid may spend per `window`; what
/// comes beyond is counted, and the uid's next spend after the window says how much was
/// left out. devaccessd keeps two: the audit rows of a user's attempts that change nothing
/// (refusals, requests answered at once without a decision: `attempts_not_recorded_before`),
/// and a user's changes (requests that ask, queue or decide; own revokes, resets and
/// withdraws), beyond which the user is told busy.
final class UserBudget: Sendable {
    enum Verdict: Sendable, Hashable {
        /// Write it; `leftOut` attempts of this uid were not written before it.
        case record(leftOut: Int)
        /// Count it only. `windowEnds`: set on the first unit the window leaves out, the
        /// moment its count can be taken (`takeLeftOut`), so it is written even if no later
        /// spend of the uid comes to carry it.
        case skip(windowEnds: ContinuousClock.Instant?)
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

    /// Whether `uid` has used its whole budget in the current window (nothing is charged).
    func exhausted(_ uid: UInt32, now: ContinuousClock.Instant = .now) -> Bool {
        windows.withLock { windows in
            guard let current = windows[uid], now - current.start < window else { return false }
            return current.recorded >= burst
        }
    }

    /// `cost`: the audit rows the attempt writes (a refusal: 1; a request: 2 per permission).
    func admit(_ uid: UInt32, cost: Int = 1, now: ContinuousClock.Instant = .now) -> Verdict {
        windows.withLock { windows in
            // A uid that stopped being refused long ago needs no window (bounded memory).
            if windows.count > 10_000 { windows = windows.filter { now - $0.value.start < window } }
            guard var current = windows[uid], now - current.start < window else {
                let carried = windows[uid]?.leftOut ?? 0
                windows[uid] = Window(start: now, recorded: max(1, cost), leftOut: 0)
                return .record(leftOut: carried)
            }
            if current.recorded + max(1, cost) <= burst {
                current.recorded += max(1, cost)
                windows[uid] = current
                return .record(leftOut: 0)
            }
            current.leftOut += 1
            windows[uid] = current
            return .skip(windowEnds: current.leftOut == 1 ? current.start + window : nil)
        }
    }

    /// The units `uid`'s window left out, once its window has ended (or at once with
    /// `ended: true`, when devaccessd stops), taken so the next spend does not carry them again.
    func takeLeftOut(_ uid: UInt32, now: ContinuousClock.Instant = .now, ended: Bool = false) -> Int {
        windows.withLock { windows in
            guard var current = windows[uid], ended || now - current.start >= window else { return 0 }
            let leftOut = current.leftOut
            current.leftOut = 0
            windows[uid] = current
            return leftOut
        }
    }

    /// Every uid with units left out in its window now (devaccessd's stop writes them).
    func uidsWithLeftOut() -> [UInt32] {
        windows.withLock { windows in windows.filter { $0.value.leftOut > 0 }.map(\.key) }
    }
}
