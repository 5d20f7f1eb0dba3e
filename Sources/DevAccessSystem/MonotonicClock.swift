import Glibc

public enum MonotonicClock {
    /// CLOCK_MONOTONIC in µs: the clock udevadm and the kernel's uptime use.
    public static func microseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }
}
