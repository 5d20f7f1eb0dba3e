/// A failed system call as it happened: the function, the path it was given (when it names
/// one) and errno, kept as values to the top, so a caller can tell ENOENT from EACCES
/// without reading text, and every message has one form:
/// `open("/dev/video0"): Permission denied (EACCES)`.
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The C function that failed, without parentheses: "open", "sendmsg", "acl_set_fd".
    public let function: String
    /// The path the call was given; nil for calls on a descriptor or none.
    public let path: String?
    public let errno: Errno

    public init(_ function: String, path: String? = nil, _ errno: Errno) {
        self.function = function
        self.path = path
        self.errno = errno
    }

    /// The calling thread's errno, read at once after `function` failed.
    public static func current(_ function: String, path: String? = nil) -> SystemCallError {
        SystemCallError(function, path: path, .current)
    }

    /// The path as a Swift string literal, so a newline or a terminal escape in a hostile
    /// file name is shown escaped, never acted on.
    public var description: String {
        "\(function)(\(path.map(\.debugDescription) ?? "")): \(errno.message) (\(errno.name))"
    }

    public var isNotFound: Bool { errno.isNotFound }
    public var isPermissionDenied: Bool { errno.isPermissionDenied }

    public static func ~= (lhs: Errno, rhs: SystemCallError) -> Bool { rhs.errno == lhs }
}

/// Runs C calls that return -1 and set errno, throwing a `SystemCallError` that names them.
public enum SystemCall {
    /// The value of `body`; on -1 a `SystemCallError` for `function` and `path`. EINTR runs
    /// `body` again unless `retryOnInterrupt` is false (a caller that must see the signal).
    @inline(__always)
    public static func value<T: FixedWidthInteger>(_ function: String, path: String? = nil,
                                                   retryOnInterrupt: Bool = true,
                                                   _ body: () -> T) throws(SystemCallError) -> T {
        switch valueOrErrno(retryOnInterrupt: retryOnInterrupt, body) {
        case .success(let value): return value
        case .failure(let error): throw SystemCallError(function, path: path, error)
        }
    }

    /// `body` returned 0 or -1 with errno; throws on -1.
    @inline(__always)
    public static func check<T: FixedWidthInteger>(_ function: String, path: String? = nil,
                                                   retryOnInterrupt: Bool = true,
                                                   _ body: () -> T) throws(SystemCallError) {
        _ = try value(function, path: path, retryOnInterrupt: retryOnInterrupt, body)
    }
}
