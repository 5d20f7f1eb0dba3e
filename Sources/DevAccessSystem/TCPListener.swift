import CLinux
import Glibc

/// An IPv4 or IPv6 address and port, as the kernel gives it for one end of a connection.
public struct TCPAddress: Sendable, Hashable, CustomStringConvertible {
    /// AF_INET or AF_INET6.
    public var family: Int32
    /// 4 or 16 bytes, network order.
    public var bytes: [UInt8]
    public var port: UInt16

    public init(family: Int32, bytes: [UInt8], port: UInt16) {
        self.family = family
        self.bytes = bytes
        self.port = port
    }

    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let shown = bytes.withUnsafeBytes { raw in inet_ntop(family, raw.baseAddress, &text, socklen_t(text.count)) }
        let host = shown == nil ? "?" : String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) },
                                                as: UTF8.self)
        return family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    public static func loopback(family: Int32, port: UInt16) -> TCPAddress {
        family == AF_INET6 ? TCPAddress(family: AF_INET6, bytes: [UInt8](repeating: 0, count: 15) + [1], port: port)
            : TCPAddress(family: AF_INET, bytes: [127, 0, 0, 1], port: port)
    }

    init?(_ storage: sockaddr_storage) {
        var storage = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            let address = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self) }
            family = AF_INET
            bytes = withUnsafeBytes(of: address.sin_addr) { Array($0) }
            port = UInt16(bigEndian: address.sin_port)
        case AF_INET6:
            let address = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in6.self) }
            family = AF_INET6
            bytes = withUnsafeBytes(of: address.sin6_addr) { Array($0) }
            port = UInt16(bigEndian: address.sin6_port)
        default:
            return nil
        }
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        if family == AF_INET6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: bytes.prefix(16)) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: bytes.prefix(4)) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
}

/// Who owns the other end of a TCP connection on this machine: TCP has no SO_PEERCRED, so
/// the kernel is asked (sock_diag) for the socket whose local end is the peer's address
/// and whose remote end is ours. Only meaningful for loopback peers, whose sockets live in
/// this network namespace.
public enum TCPSocketOwner {
    /// The socket as the kernel knows it: its owner and its inode (`socket:[INODE]` in the
    /// /proc/PID/fd of every process holding it; 0 when none holds it yet).
    public struct Identity: Sendable, Hashable {
        public var uid: UInt32
        public var inode: UInt64
    }

    public static func uid(of peer: TCPAddress, connectedTo local: TCPAddress) throws(Errno) -> UInt32 {
        try identity(of: peer, connectedTo: local).uid
    }

    public static func identity(of peer: TCPAddress, connectedTo local: TCPAddress) throws(Errno) -> Identity {
        guard peer.family == local.family else { throw Errno(rawValue: EAFNOSUPPORT) }
        var inode: UInt64 = 0
        let result = peer.bytes.withUnsafeBufferPointer { source in
            local.bytes.withUnsafeBufferPointer { destination in
                devaccess_tcp_socket_uid(peer.family, source.baseAddress, peer.port, destination.baseAddress, local.port,
                                         &inode)
            }
        }
        guard result >= 0, result <= Int64(UInt32.max) else { throw Errno(rawValue: CInt(truncatingIfNeeded: -result)) }
        return Identity(uid: UInt32(result), inode: inode)
    }
}

extension TCPSocketOwner {
    /// Who owns the other end of a connected TCP socket of ours (gpsd's socket, for
    /// devaccessd's connection to gpsd): nil when the kernel names nobody (a peer on
    /// another host, or a connection already gone).
    public static func peerOwner(ofConnected descriptor: Int32) -> UInt32? {
        var local = sockaddr_storage(), remote = sockaddr_storage()
        var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var remoteLength = localLength
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &localLength) }
        }
        let peered = withUnsafeMutablePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(descriptor, $0, &remoteLength) }
        }
        guard named == 0, peered == 0, let mine = TCPAddress(local), let theirs = TCPAddress(remote) else { return nil }
        return try? uid(of: theirs, connectedTo: mine)
    }

    /// True for uids a login user can hold: 1000 and up (login.defs' UID_MIN on Debian),
    /// their subordinate uids included, except `nobody` (65534), which daemons run as.
    public static func isUserAccount(_ uid: UInt32) -> Bool {
        uid >= 1000 && uid != 65_534
    }
}

/// A connection `TCPListener.accept` took: the descriptor (non-blocking, close-on-exec)
/// and both ends.
public struct AcceptedTCP: Sendable {
    public var descriptor: Int32
    public var peer: TCPAddress
    public var local: TCPAddress
    /// Where the client dialled, when netfilter redirected it here (conntrack's original
    /// destination); nil when it dialled `local` itself.
    public var redirectedFrom: TCPAddress?

    /// The address the client's own socket is connected to: what sock_diag knows it by.
    public var dialled: TCPAddress { redirectedFrom ?? local }
}

/// A listening TCP socket on one address (non-blocking, close-on-exec, SO_REUSEADDR so a
/// restarted daemon can bind again while old connections linger in TIME_WAIT).
public final class TCPListener: Sendable {
    private let socket: FileDescriptor
    public var descriptor: Int32 { socket.rawValue }
    public let address: TCPAddress

    public static let defaultBacklog: Int32 = 64

    public init(_ address: TCPAddress, backlog: Int32 = TCPListener.defaultBacklog) throws(Errno) {
        let fd = Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
                              | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .current }
        let socket = FileDescriptor(owning: fd)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if address.family == AF_INET6 {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = address.withSockaddr { Glibc.bind(fd, $0, $1) }
        guard bound == 0, listen(fd, backlog) == 0 else { throw .current }
        self.socket = socket
        // Port 0 asks the kernel for one: say which.
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.address = named == 0 ? TCPAddress(storage) ?? address : address
    }

    /// The next waiting connection; nil when none waits (EAGAIN) or it vanished first.
    public func accept() throws(Errno) -> AcceptedTCP? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                devaccess_accept4(descriptor, $0, &length, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            }
        }
        guard fd >= 0 else {
            let error = Errno.current
            switch error.rawValue {
            case EAGAIN, EINTR, ECONNABORTED: return nil
            default: throw error
            }
        }
        let accepted = FileDescriptor(owning: fd)
        var local = sockaddr_storage()
        var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &localLength) }
        }
        guard named == 0, let peer = TCPAddress(storage), let mine = TCPAddress(local) else { return nil }
        var original = sockaddr_storage()
        let redirected = devaccess_original_destination(fd, mine.family, &original) == 0
            ? TCPAddress(original).flatMap { $0 == mine ? nil : $0 } : nil
        return AcceptedTCP(descriptor: accepted.release(), peer: peer, local: mine, redirectedFrom: redirected)
    }
}
