import Glibc
import CSystemd
import DevAccessSystem

/// The libc calls the broker's server makes, each in one place, through DevAccessSystem's
/// `valueOrErrno` (errno captured at once, EINTR retried there).
enum Socket {
    /// An `eventfd` used to wake the event loop from other threads.
    static func makeEventFD() throws(Errno) -> CInt {
        let fd = eventfd(0, CInt(EFD_NONBLOCK) | CInt(EFD_CLOEXEC))
        guard fd >= 0 else { throw Errno.current }
        return fd
    }

    /// Sends without blocking and without SIGPIPE; returns bytes sent (0 when the
    /// socket buffer is full).
    static func send(_ fd: CInt, _ bytes: UnsafeRawBufferPointer) -> Result<Int, Errno> {
        let result = valueOrErrno { Glibc.send(fd, bytes.baseAddress, bytes.count, CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT)) }
        if case .failure(let error) = result, error == .wouldBlock { return .success(0) }
        return result
    }

    static func close(_ fd: CInt) {
        // Never retried: on Linux the descriptor is gone even after EINTR.
        _ = Glibc.close(fd)
    }
}

extension sockaddr_un {
    /// A Unix socket address for `path`, or nil when the path does not fit.
    static func make(_ path: String) -> (sockaddr_un, socklen_t)? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path), !bytes.contains(0) else {
            return nil
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        return (address, socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1))
    }
}
