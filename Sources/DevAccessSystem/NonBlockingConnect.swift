import Glibc

/// connect(2) on a non-blocking socket, where a signal is no failure: EINTR leaves the
/// connection being made in the background just as EINPROGRESS does (connect is not
/// called again, which would say EALREADY), so both are `inProgress`.
public enum NonBlockingConnect {
    public enum Start: Sendable, Hashable {
        case connected
        /// Wait for the socket to be writable, then ask `outcome`.
        case inProgress
    }

    /// Starts connecting `fd` to the socket address in `address` (a `sockaddr_*`'s bytes).
    public static func start(_ fd: CInt, to address: UnsafeRawBufferPointer) throws(SystemCallError) -> Start {
        guard let base = address.baseAddress else { throw SystemCallError("connect", Errno(rawValue: EINVAL)) }
        if Glibc.connect(fd, base.assumingMemoryBound(to: sockaddr.self), socklen_t(address.count)) == 0 {
            return .connected
        }
        let error = Errno.current
        guard error == .inProgress || error == .interrupted else { throw SystemCallError("connect", error) }
        return .inProgress
    }

    /// How a connection that was `inProgress` ended, once the socket is writable (SO_ERROR).
    public static func outcome(_ fd: CInt) throws(SystemCallError) {
        var soError: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        try SystemCall.check("getsockopt") { getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length) }
        guard soError == 0 else { throw SystemCallError("connect", Errno(rawValue: soError)) }
    }
}
