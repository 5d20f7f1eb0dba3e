import Testing
import Foundation
import Glibc
import DevAccessSystem
import DevAccessTestSupport

/// Who is at the other end of a loopback TCP connection, from the kernel (sock_diag): what
/// devaccessd's gpsd-compatible endpoint serves location by.
@Suite(.serialized)
struct TCPSocketOwnerTests {
    /// Accepts one connection within `seconds` (a generous bound: bash has to start).
    static func acceptOne(_ listener: TCPListener, seconds: Double = 10) throws -> AcceptedTCP {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let connection = try listener.accept() { return connection }
            var descriptor = pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, 100)
        }
        throw SetupError("nobody connected to \(listener.address) within \(seconds) s")
    }

    /// `user` opens a TCP connection with bash's /dev/tcp and holds it.
    static func connect(as user: TestUser, to address: TCPAddress) throws -> BackgroundProcess {
        let host = address.family == AF_INET6 ? "::1" : "127.0.0.1"
        return try BackgroundProcess("/usr/bin/setpriv", [
            "--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--",
            "/usr/bin/bash", "-c", "exec 3<>/dev/tcp/\(host)/\(address.port); exec sleep 30",
        ])
    }

    @Test(arguments: [AF_INET, AF_INET6])
    func theKernelNamesTheUserWhoConnected(family: Int32) throws {
        let user = try TestUser("tcpown")
        let listener = try TCPListener(.loopback(family: family, port: 0))
        #expect(listener.address.port != 0)
        let holder = try Self.connect(as: user, to: listener.address)
        defer { withExtendedLifetime(holder) {} }
        let connection = try Self.acceptOne(listener)
        defer { close(connection.descriptor) }
        #expect(connection.peer.family == family)
        #expect(try TCPSocketOwner.uid(of: connection.peer, connectedTo: connection.local) == user.uid)
        // The other way round is our own accepted socket: root's, not the user's.
        #expect(try TCPSocketOwner.uid(of: connection.local, connectedTo: connection.peer) == 0)
    }

    @Test func aConnectionThatIsGoneNamesNobody() throws {
        let listener = try TCPListener(.loopback(family: AF_INET, port: 0))
        let nobody = TCPAddress(family: AF_INET, bytes: [127, 0, 0, 1], port: 1)
        #expect(throws: Errno.noSuchFile) { try TCPSocketOwner.uid(of: nobody, connectedTo: listener.address) }
        #expect(throws: Errno(rawValue: EAFNOSUPPORT)) {
            try TCPSocketOwner.uid(of: .loopback(family: AF_INET6, port: 1), connectedTo: listener.address)
        }
    }

    /// sock_diag's exact lookup falls back to a listening socket on the asked local port
    /// when no connection matches (the kernel looks a socket up as it would for an
    /// incoming packet). A client whose source port conntrack rewrote (a clash after the
    /// gpsd rule's redirect) is looked up at a port it does not hold: a listener of another
    /// user's there must not answer for it.
    @Test(arguments: [AF_INET, AF_INET6])
    func aListenerOnThePortIsNotTheConnection(family: Int32) throws {
        let user = try TestUser("tcplsn")
        let host = family == AF_INET6 ? "::1" : "127.0.0.1"
        let ready = try TemporaryDirectory()
        guard chown(ready.path, user.uid, user.gid) == 0 else { throw SetupError("chown \(ready.path)") }
        let holder = try BackgroundProcess("/usr/bin/setpriv", [
            "--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--", "/usr/bin/python3", "-c", """
            import socket, sys, time
            s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
            s.bind((sys.argv[1], 0)); s.listen(1)
            open(sys.argv[2] + "/port", "w").write(str(s.getsockname()[1]))
            time.sleep(30)
            """, host, ready.path,
        ])
        defer { withExtendedLifetime(holder) {} }
        var port: UInt16?
        for _ in 0..<100 where port == nil {
            port = (try? String(contentsOfFile: ready.path + "/port", encoding: .utf8)).flatMap { UInt16($0) }
            if port == nil { usleep(100_000) }
        }
        guard let port else { throw SetupError("the user's listener did not start") }
        let listening = TCPAddress.loopback(family: family, port: port)
        let gpsd = TCPAddress.loopback(family: family, port: 2947)
        #expect(throws: Errno.noSuchFile) { try TCPSocketOwner.uid(of: listening, connectedTo: gpsd) }
    }

    @Test func addressesReadBack() {
        #expect(TCPAddress.loopback(family: AF_INET, port: 2948).description == "127.0.0.1:2948")
        #expect(TCPAddress.loopback(family: AF_INET6, port: 2948).description == "[::1]:2948")
    }
}
