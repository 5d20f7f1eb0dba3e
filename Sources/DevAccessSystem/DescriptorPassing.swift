import Glibc
import CLinux

/// File descriptors over a Unix stream socket (SCM_RIGHTS), over the cmsg helpers of
/// CLinux: `open` hands the node it opened to its caller this way, and `run` takes the
/// program's streams.
public enum DescriptorPassing {
    /// Sends `bytes` (at least one) with `descriptors` attached to the first, without
    /// blocking and without SIGPIPE. The bytes sent: 0 when the socket buffer is full (try
    /// again when it is writable; the descriptors were not sent).
    public static func send(_ socket: CInt, _ bytes: UnsafeRawBufferPointer,
                            descriptors: [CInt]) -> Result<Int, Errno> {
        while true {
            let sent = descriptors.withUnsafeBufferPointer { fds in
                devaccess_send_with_fds(socket, bytes.baseAddress, bytes.count,
                                        CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT), fds.baseAddress, CInt(fds.count))
            }
            if sent >= 0 { return .success(sent) }
            let error = Errno.current
            if error == .interrupted { continue }
            if error == .wouldBlock { return .success(0) }
            return .failure(error)
        }
    }

    /// What one `recvmsg(2)` brought: bytes into `buffer`, and the descriptors that came
    /// with them (close-on-exec, owned by the caller). `truncated`: more descriptors came
    /// than fit; those were closed.
    public struct Received {
        public var count: Int
        public var descriptors: [CInt]
        public var truncated: Bool
    }

    public static func receive(_ socket: CInt, into buffer: UnsafeMutableRawBufferPointer) -> Result<Received, Errno> {
        var passed = [CInt](repeating: -1, count: Int(DEVACCESS_MAX_PASSED_FDS))
        var passedCount: CInt = 0
        var truncated: CInt = 0
        while true {
            let received = devaccess_recv_with_fds(socket, buffer.baseAddress, buffer.count, 0, &passed, &passedCount,
                                                   &truncated)
            if received >= 0 {
                return .success(Received(count: received, descriptors: Array(passed.prefix(Int(passedCount))),
                                         truncated: truncated != 0))
            }
            let error = Errno.current
            if error == .interrupted { continue }
            return .failure(error)
        }
    }
}
