import Glibc
import CLinux

/// An owned file descriptor, closed when the owner goes away.
public struct FileDescriptor: ~Copyable, Sendable {
    public let rawValue: CInt

    public init(owning rawValue: CInt) { self.rawValue = rawValue }

    /// Opens `path` with `open(2)`; the error names open and the path.
    public static func open(_ path: String, _ flags: CInt, mode: mode_t = 0) throws(SystemCallError) -> FileDescriptor {
        FileDescriptor(owning: try SystemCall.value("open", path: path) { Glibc.open(path, flags, mode) })
    }

    /// An `O_PATH|O_NOFOLLOW` descriptor: names the file without opening the device
    /// behind it (no driver open, no side effects) and never follows a symlink.
    public static func openPath(_ path: String) throws(SystemCallError) -> FileDescriptor {
        try open(path, devaccess_o_path() | O_NOFOLLOW | O_CLOEXEC)
    }

    /// `/proc/self/fd/N`: lets path-based calls (libacl) act on what this fd refers to,
    /// including an `O_PATH` fd, so no second path lookup can be raced.
    public var procPath: String { "/proc/self/fd/\(rawValue)" }

    /// Hands the descriptor to a caller that owns it from now on (it is not closed here).
    public consuming func release() -> CInt {
        let fd = rawValue
        discard self
        return fd
    }

    /// Closes it now rather than when its owner goes away (a descriptor taken over only to
    /// be closed: one that came unasked, or an extra one).
    public consuming func close() {}

    deinit {
        // close is never retried: on Linux the fd is gone even after EINTR.
        _ = Glibc.close(rawValue)
    }
}

extension FileDescriptor {
    /// Writes all of `text` to `fd`, again after a signal or a short write; on a
    /// non-blocking descriptor whose buffer is full (EAGAIN), again once it has room, until
    /// `deadline` (nil: no limit). False when `write(2)` failed otherwise (EPIPE: the reader
    /// is gone) or the deadline passed with text left.
    @discardableResult
    public static func writeAll(_ fd: CInt, _ text: String, until deadline: ContinuousClock.Instant? = nil) -> Bool {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = valueOrErrno { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
            switch written {
            case .success(let count):
                bytes = bytes.dropFirst(count)
            case .failure(let error) where error == .wouldBlock:
                guard (try? Poll.wait(for: .writable(fd), until: deadline)) == true else { return false }
            case .failure:
                return false
            }
        }
        return true
    }
}

extension FileDescriptor {
    /// The whole file at `path` (up to `limit` bytes), keeping the failed call and errno
    /// when it cannot be read, so a message can say EACCES rather than "could not be read".
    public static func contents(of path: String, limit: Int = 16 << 20) throws(SystemCallError) -> [UInt8] {
        try open(path, O_RDONLY | O_CLOEXEC).contents(path: path, limit: limit)
    }

    /// What is left to read from this descriptor, up to about `limit` bytes (whole reads of
    /// 64 KiB: a caller that must know whether more followed asks for one byte more than it
    /// takes); `path` names the file in an error.
    public func contents(path: String? = nil, limit: Int = 16 << 20) throws(SystemCallError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while bytes.count < limit {
            let count = try SystemCall.value("read", path: path) {
                chunk.withUnsafeMutableBytes { Glibc.read(rawValue, $0.baseAddress, $0.count) }
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[..<count])
        }
        return bytes
    }
}

extension FileDescriptor {
    /// A second descriptor of what `fd` refers to (close-on-exec), with a file position of
    /// its own only for a directory walk (readdir) next to `openat` calls: the two share one.
    public static func duplicate(_ fd: CInt) throws(SystemCallError) -> FileDescriptor {
        FileDescriptor(owning: try SystemCall.value("fcntl") { fcntl(fd, F_DUPFD_CLOEXEC, 0) })
    }

    /// A directory stream (`readdir`) over this directory, which takes the descriptor over:
    /// `closedir` closes it. When fdopendir fails, the descriptor is closed here.
    public consuming func directoryStream() throws(SystemCallError) -> OpaquePointer {
        guard let stream = fdopendir(rawValue) else {
            let error = SystemCallError.current("fdopendir")
            _ = consume self
            throw error
        }
        discard self
        return stream
    }
}
