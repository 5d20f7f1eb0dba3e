import Glibc
import CSystemd
import DevAccessSystem

/// Why the broker could not start listening.
public struct ListenError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var problem: String
    public var description: String { "cannot listen on \(path): \(problem)" }
}

/// The broker's listening socket: a Unix stream socket at `path`, mode 0666 (authority
/// comes from the peer's credentials, not from who may connect).
///
/// A stale socket left by a crashed broker is replaced; a live one (something accepts
/// connections on it) is not, and neither is anything at the path that is not a socket.
final class Listener: Sendable {
    let path: String
    let descriptor: CInt
    /// The socket file's identity, so that shutdown removes only the file this broker
    /// made (not one a newer broker bound meanwhile).
    private let device: UInt64
    private let inode: UInt64

    init(path: String, backlog: CInt = 512) throws(ListenError) {
        self.path = path
        guard let (address, length) = sockaddr_un.make(path) else {
            throw ListenError(path: path, problem: "the path is empty or longer than 107 bytes")
        }
        try Self.prepareDirectory(of: path)
        try Self.removeStale(path)
        let fd = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ListenError(path: path, problem: "socket(): \(Errno.current)") }
        // Closed here on every failure below; kept (released) once it listens.
        let socket = FileDescriptor(owning: fd)
        var bound = address
        let rc = withUnsafePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard rc == 0 else {
            throw ListenError(path: path, problem: "bind(): \(Errno.current)")
        }
        // Everyone may connect; what a peer may do is decided from its credentials.
        guard chmod(path, 0o666) == 0 else {
            let error = Errno.current
            unlink(path)
            throw ListenError(path: path, problem: "chmod 0666: \(error)")
        }
        guard listen(fd, backlog) == 0 else {
            let error = Errno.current
            unlink(path)
            throw ListenError(path: path, problem: "listen(): \(error)")
        }
        var info = stat()
        lstat(path, &info)
        descriptor = socket.release()
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Closes the socket and removes its file if it is still the one bound here.
    func close() {
        Socket.close(descriptor)
        var info = stat()
        if lstat(path, &info) == 0, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode {
            unlink(path)
        }
    }

    /// Creates the socket's directory (0755) when missing; refuses a directory others
    /// can write to, or another user owns, unless it is sticky like /tmp (someone
    /// could swap the socket).
    private static func prepareDirectory(of path: String) throws(ListenError) {
        let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        guard !directory.isEmpty else { return }
        var info = stat()
        if stat(directory, &info) != 0 {
            guard errno == ENOENT else { throw ListenError(path: path, problem: "\(directory): \(Errno.current)") }
            guard mkdir(directory, 0o755) == 0 || errno == EEXIST else {
                throw ListenError(path: path, problem: "cannot create \(directory): \(Errno.current)")
            }
            return
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw ListenError(path: path, problem: "\(directory) is not a directory")
        }
        if info.st_mode & 0o002 != 0 && info.st_mode & 0o1000 == 0 {
            throw ListenError(path: path, problem: "\(directory) is writable by everyone and not sticky")
        }
        if info.st_uid != 0 && info.st_uid != geteuid() && info.st_mode & 0o1000 == 0 {
            throw ListenError(path: path, problem: "\(directory) belongs to uid \(info.st_uid), who could replace the socket")
        }
    }

    private static func removeStale(_ path: String) throws(ListenError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw ListenError(path: path, problem: "something that is not a socket is there; not removing it")
        }
        guard let (address, length) = sockaddr_un.make(path) else { return }
        let opened = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard opened >= 0 else { return }
        let probe = FileDescriptor(owning: opened)
        var target = address
        let rc = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe.rawValue, $0, length) }
        }
        if rc == 0 {
            throw ListenError(path: path, problem: "another broker accepts connections there (is devaccessd already running?)")
        }
        guard errno == ECONNREFUSED else {
            throw ListenError(path: path, problem: "cannot tell whether the socket there is in use: \(Errno.current)")
        }
        unlink(path)
    }
}
