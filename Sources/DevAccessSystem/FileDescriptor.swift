import Glibc
import CLinux

/// An owned file descriptor, closed when the owner goes away.
public struct FileDescriptor: ~Copyable {
    public let rawValue: CInt

    public init(owning rawValue: CInt) { self.rawValue = rawValue }

    /// Opens `path` with `open(2)`.
    public static func open(_ path: String, _ flags: CInt, mode: mode_t = 0) throws(Errno) -> FileDescriptor {
        let fd = try valueOrErrno { Glibc.open(path, flags, mode) }.get()
        return FileDescriptor(owning: fd)
    }

    /// An `O_PATH|O_NOFOLLOW` descriptor: names the file without opening the device
    /// behind it (no driver open, no side effects) and never follows a symlink.
    public static func openPath(_ path: String) throws(Errno) -> FileDescriptor {
        try open(path, devaccess_o_path() | O_NOFOLLOW | O_CLOEXEC)
    }

    /// `/proc/self/fd/N`: lets path-based calls (libacl) act on what this fd refers to,
    /// including an `O_PATH` fd, so no second path lookup can be raced.
    public var procPath: String { "/proc/self/fd/\(rawValue)" }

    deinit {
        // close is never retried: on Linux the fd is gone even after EINTR.
        _ = Glibc.close(rawValue)
    }
}

extension FileDescriptor {
    /// Writes all of `text` to `fd`, again after a signal or a short write. False when
    /// `write(2)` failed otherwise (EPIPE: the reader is gone); nothing is retried then.
    @discardableResult
    public static func writeAll(_ fd: CInt, _ text: String) -> Bool {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            bytes = bytes.dropFirst(written)
        }
        return true
    }
}
