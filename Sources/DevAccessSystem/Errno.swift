import Glibc
import CLinux

/// A C `errno` value with a readable name; the one error type of the syscall layer.
public struct Errno: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: CInt
    public init(rawValue: CInt) { self.rawValue = rawValue }

    /// The calling thread's errno, read at once after the failing call.
    public static var current: Errno { Errno(rawValue: errno) }

    public static let noSuchFile = Errno(rawValue: ENOENT)
    public static let permissionDenied = Errno(rawValue: EACCES)
    public static let notPermitted = Errno(rawValue: EPERM)
    public static let interrupted = Errno(rawValue: EINTR)
    public static let tooManySymlinks = Errno(rawValue: ELOOP)
    public static let notSupported = Errno(rawValue: EOPNOTSUPP)
    public static let timedOut = Errno(rawValue: ETIMEDOUT)
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let inProgress = Errno(rawValue: EINPROGRESS)
    public static let noDevice = Errno(rawValue: ENXIO)
    public static let badIoctl = Errno(rawValue: ENOTTY)

    /// `strerror` text, e.g. "No such file or directory".
    public var message: String { String(cString: strerror(rawValue)) }
    /// The strerror text alone: messages that people and tests read ("...: Permission denied")
    /// keep their form; `SystemCallError` adds the function and the name.
    public var description: String { message }

    /// The symbolic name, e.g. "ENOENT"; "errno N" for a value glibc does not name.
    public var name: String {
        guard let name = strerrorname_np(rawValue) else { return "errno \(rawValue)" }
        return String(cString: name)
    }

    /// ENOENT: the file, or a directory on the way to it, is not there.
    public var isNotFound: Bool { self == .noSuchFile }
    /// EACCES or EPERM: the caller may not (mode bits, ACL, capability, or an LSM said no).
    public var isPermissionDenied: Bool { self == .permissionDenied || self == .notPermitted }

    public static func ~= (lhs: Errno, rhs: any Error) -> Bool {
        (rhs as? Errno) == lhs
    }
}

/// Runs a C call that returns -1 and sets errno, retrying EINTR (the modules above the
/// system layer call it too: EINTR is handled here only).
@inline(__always)
public func valueOrErrno<T: FixedWidthInteger>(retryOnInterrupt: Bool = true, _ body: () -> T) -> Result<T, Errno> {
    while true {
        let value = body()
        if value != -1 { return .success(value) }
        let error = Errno.current
        if retryOnInterrupt && error == .interrupted { continue }
        return .failure(error)
    }
}
