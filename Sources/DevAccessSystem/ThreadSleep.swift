import Glibc

/// Sleeping on a thread of its own (never on one of Swift's pool threads, which
/// `Task.sleep` is for).
public enum ThreadSleep {
    /// Blocks the calling thread for `duration`; a signal does not cut it short: the sleep
    /// goes on for the time left.
    public static func sleep(for duration: Duration) {
        guard duration > .zero else { return }
        let (seconds, attoseconds) = duration.components
        var pause = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000)), left = timespec()
        while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
    }
}
