import Glibc

/// poll(2) with a deadline: the one place that turns a deadline into poll's milliseconds and
/// retries EINTR with the time left, so no caller computes a timeout or sees EINTR.
public enum Poll {
    /// A descriptor and the events that end a wait for it.
    public struct Interest: Sendable, Hashable {
        public var descriptor: CInt
        public var events: Int16

        public init(_ descriptor: CInt, events: Int16) {
            self.descriptor = descriptor
            self.events = events
        }

        public static func readable(_ descriptor: CInt) -> Interest { Interest(descriptor, events: Int16(POLLIN)) }
        public static func writable(_ descriptor: CInt) -> Interest { Interest(descriptor, events: Int16(POLLOUT)) }
    }

    /// Waits until one of `interests` has an event (its `revents`, in order, are returned) or
    /// `deadline` passes (nil returned). nil `deadline`: no limit.
    public static func wait(_ interests: [Interest], until deadline: ContinuousClock.Instant?)
        throws(SystemCallError) -> [Int16]? {
        var descriptors = interests.map { pollfd(fd: $0.descriptor, events: $0.events, revents: 0) }
        while true {
            let timeout = milliseconds(until: deadline)
            let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
            if ready > 0 { return descriptors.map(\.revents) }
            if ready == 0 {
                // poll(2) rounds to its own clock: wait out what is left rather than end early.
                guard let deadline, ContinuousClock.now < deadline else { return nil }
                continue
            }
            let error = Errno.current
            guard error == .interrupted else { throw SystemCallError("poll", error) }
        }
    }

    /// One descriptor: true when it has one of its events, false when `deadline` passed first.
    public static func wait(for interest: Interest, until deadline: ContinuousClock.Instant?)
        throws(SystemCallError) -> Bool {
        try wait([interest], until: deadline) != nil
    }

    /// Whether `interest` has one of its events now, without waiting (a poll(2) error: false).
    public static func isReady(_ interest: Interest) -> Bool {
        var descriptor = pollfd(fd: interest.descriptor, events: interest.events, revents: 0)
        return poll(&descriptor, 1, 0) > 0
    }

    /// poll(2)'s timeout for `deadline`: milliseconds rounded up (a wait never ends before
    /// its deadline, and a sub-millisecond rest does not spin), 0 once it has passed, -1 for none.
    public static func milliseconds(until deadline: ContinuousClock.Instant?,
                                    now: ContinuousClock.Instant = .now) -> CInt {
        guard let deadline else { return -1 }
        let left = now.duration(to: deadline)
        guard left > .zero else { return 0 }
        let (seconds, attoseconds) = left.components
        let rounded = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return CInt(clamping: rounded)
    }
}
