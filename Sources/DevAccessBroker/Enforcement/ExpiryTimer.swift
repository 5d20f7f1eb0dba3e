import FoundationEssentials
import Glibc
import Dispatch

/// A one-shot timer on the wall clock for the instant the next grant runs out.
///
/// A Dispatch timer rather than a `timerfd` in the worker's `poll`: Glibc's Swift module
/// does not export timerfd, and libdispatch arms an absolute `CLOCK_REALTIME` timerfd
/// itself, which the kernel keeps right when the clock is set (NTP step, admin). On
/// firing it only calls `fire`, which wakes the worker; the work runs there.
final class ExpiryTimer {
    private let source: any DispatchSourceTimer
    private(set) var armedFor: Date?

    init(fire: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "devaccessd expiry timer"))
        source.setEventHandler(handler: fire)
        source.schedule(wallDeadline: .distantFuture)
        source.resume()
    }

    deinit { source.cancel() }

    /// Arms for `date` (a past date fires at once); nil disarms.
    func arm(_ date: Date?) {
        armedFor = date
        guard let date else {
            source.schedule(wallDeadline: .distantFuture)
            return
        }
        let seconds = date.timeIntervalSince1970
        let whole = max(0, seconds.rounded(.down))
        // Rounded up to the microsecond the ledger stores: never before the expiry.
        let nanoseconds = min(999_999_000, ((seconds - whole) * 1_000_000).rounded(.up) * 1_000)
        let deadline = DispatchWallTime(timespec: timespec(tv_sec: time_t(whole), tv_nsec: Int(nanoseconds)))
        source.schedule(wallDeadline: deadline, repeating: .never, leeway: .milliseconds(1))
    }

    /// Forgets the armed date after it fired, so the same date can be armed again.
    func fired() { armedFor = nil }
}
