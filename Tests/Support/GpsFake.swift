import Foundation
import Glibc
import Synchronization

// gpsd for tests: fed by gpsfake from an NMEA log on a free loopback port (the location
// suites of the hardware adapter and of devaccessd share it).

/// A loopback port nobody holds now, that no other test of this process was given, and
/// that the kernel never picks on its own. Ports the kernel picks (bind to port 0, and the
/// local end of every outgoing connection) come from net.ipv4.ip_local_port_range, so a
/// port taken from there could be handed out twice (a birthday collision among the hundreds
/// a run asks for: one test's daemon then talked to another test's gpsd) or become some
/// connection's local end before the test listens on it ("Address already in use"). So the
/// ports come from below that range, in turn from a start that differs per process.
public func freeLoopbackPort() throws -> UInt16 {
    let candidates = portsBelowEphemeralRange()
    guard !candidates.isEmpty else { throw SetupError("no loopback ports below the kernel's ephemeral range") }
    return try nextPort.withLock { next -> UInt16 in
        if next == nil { next = Int(UInt32(getpid()) * 7_919 % UInt32(candidates.count)) }
        for _ in 0..<candidates.count {
            guard let index = next else { break }
            let port = UInt16(candidates.lowerBound + index)
            next = (index + 1) % candidates.count
            if isUnbound(port: port) { return port }
        }
        throw SetupError("every loopback port in \(candidates) is taken or was given to another test")
    }
}

/// The index in `portsBelowEphemeralRange()` of the next port to try; each is tried once a run.
private let nextPort = Mutex<Int?>(nil)

/// 10000 up to the first port of ip_local_port_range (32768 by default).
func portsBelowEphemeralRange() -> Range<Int> {
    let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    let low = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32_768
    return 10_000..<max(10_000, min(low, 65_536))
}

/// Whether nothing holds `port` on IPv4 or IPv6 (both bound without SO_REUSEADDR, so even a
/// connection's local end or a TIME_WAIT counts as taken).
private func isUnbound(port: UInt16) -> Bool {
    let v4 = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
    guard v4 >= 0 else { return false }
    defer { close(v4) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    guard withSockaddr(&address, { bind(v4, $0, $1) }) == 0 else { return false }
    let v6 = socket(AF_INET6, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
    guard v6 >= 0 else { return true }   // no IPv6 here
    defer { close(v6) }
    var only: CInt = 1
    setsockopt(v6, CInt(IPPROTO_IPV6), IPV6_V6ONLY, &only, socklen_t(MemoryLayout<CInt>.size))
    var address6 = sockaddr_in6()
    address6.sin6_family = sa_family_t(AF_INET6)
    address6.sin6_port = port.bigEndian
    return withUnsafePointer(to: &address6) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(v6, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
    } == 0
}

public func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

public func withSockaddr(_ address: inout sockaddr_in, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt {
    withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

/// True once something listens on 127.0.0.1:`port`, read from /proc/net/tcp (what
/// `ss -Hltn` shows) so that no test connection is made: gpsfake starts its feed on
/// the first connection, and a probe connection would use up the log.
public func isListening(port: UInt16) -> Bool {
    !listeningSocketInodes(port: port).isEmpty
}

/// The inodes of the sockets listening at `port`; with `reachedFromIPv4Loopback`, only those
/// a connection to 127.0.0.1:`port` can reach (bound to 127.0.0.1 or any address, also
/// through IPv6's `::`), not one on ::1 alone.
func listeningSocketInodes(port: UInt16, reachedFromIPv4Loopback: Bool = false) -> Set<String> {
    let hexPort = String(format: ":%04X", port)
    let reaching = ["0100007F", "00000000", "0000000000000000FFFF00000100007F",
                    "00000000000000000000000000000000"].map { $0 + hexPort }
    var inodes: Set<String> = []
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            // fields: sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode;
            // st 0A is LISTEN.
            guard fields.count > 9, fields[1].hasSuffix(hexPort), fields[3] == "0A" else { continue }
            if reachedFromIPv4Loopback && !reaching.contains(String(fields[1])) { continue }
            inodes.insert(String(fields[9]))
        }
    }
    return inodes
}

/// Whether a process of `group` holds one of `inodes` (its /proc/PID/fd links read
/// `socket:[INODE]`).
func processGroup(_ group: pid_t, holdsOneOf inodes: Set<String>) -> Bool {
    guard !inodes.isEmpty, let pids = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return false }
    for pid in pids where pid.allSatisfy(\.isNumber) {
        guard let pidNumber = pid_t(pid), getpgid(pidNumber) == group,
              let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { continue }
        for fd in fds {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"),
                  target.hasPrefix("socket:["), target.hasSuffix("]") else { continue }
            if inodes.contains(String(target.dropFirst("socket:[".count).dropLast())) { return true }
        }
    }
    return false
}

/// gpsd, fed through a pty by gpsfake from an NMEA log, on a free loopback port.
/// gpsfake and its gpsd run in their own process group, which `stop()` ends.
public final class GpsFakeProcess: Sendable {
    public static let isInstalled = executable("gpsfake") != nil && executable("gpsd") != nil

    public let port: UInt16
    public let processGroup: pid_t
    public let logPath: String

    /// `gpsfake -1 -c 0.05 -P PORT -W 30 LOG`: one pass, 50 ms per sentence, exits 30 s
    /// after the log ends (we stop it long before).
    public convenience init(log: String) throws {
        try self.init(log: log, port: try freeLoopbackPort())
    }

    /// The same on a chosen port: a gpsd restarted where the last one listened.
    public convenience init(log: String, port: UInt16) throws {
        try self.init(port: port, arguments: ["gpsfake", "-1", "-c", "0.05", "-P", String(port), "-W", "30", log])
    }

    /// gpsfake cycling `log` for as long as it runs (no `-1`): a receiver that keeps
    /// reporting, for tests that need a fresh fix for longer than one pass.
    public convenience init(cycling log: String) throws {
        let port = try freeLoopbackPort()
        try self.init(port: port, arguments: ["gpsfake", "-c", "0.05", "-P", String(port), log])
    }

    /// A bare gpsd with no device: `gpsd -N -S PORT`.
    public convenience init(gpsdWithoutDevices: Void) throws {
        let port = try freeLoopbackPort()
        guard let gpsd = GpsFakeProcess.executable("gpsd") else { throw SetupError("gpsd not found") }
        try self.init(port: port, arguments: [gpsd, "-N", "-S", String(port),
                                              "-F", Self.bareControlSocket(port)], expectsDevice: false)
    }

    private init(port: UInt16, arguments: [String], expectsDevice: Bool = true) throws {
        self.port = port
        logPath = NSTemporaryDirectory() + "devaccess-gpsfake-\(port).log"
        processGroup = try Self.start(arguments, port: port, log: logPath, expectsDevice: expectsDevice)
    }

    /// Starts `arguments` until its gpsd listens and, for gpsfake, lists the fake receiver.
    ///
    /// gpsfake waits only until gpsd's control socket *file* exists, then connects to add
    /// its pty; a gpsd that has bound but not yet listened refuses that connection, and
    /// gpsfake then silently adds no device: a gpsd with `DEVICES: []` for ever (twice in
    /// CI under the full suite's load). So the receiver is asked for with `?DEVICES;` (no
    /// WATCH: gpsd does not open the pty for it, and the log is not fed before a client
    /// watches), and a gpsfake without one is stopped and started again.
    private static func start(_ arguments: [String], port: UInt16, log: String,
                              expectsDevice: Bool) throws -> pid_t {
        var attempt = 0
        while true {
            attempt += 1
            let group = try spawnInOwnGroup(arguments, log: log)
            try waitUntilListening(group, port: port, arguments: arguments, log: log)
            if !expectsDevice || listsADevice(port: port, within: .seconds(5)) { return group }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            end(group)
            guard attempt < 3 else {
                throw SetupError("\(arguments[0]) on port \(port) listed no receiver after \(attempt) starts; "
                                 + "its output:\n\(output)")
            }
        }
    }

    /// Ready when our own gpsd listens where the test connects: another program's socket
    /// there would otherwise be taken for it (and gpsd may still bind ::1 beside it).
    private static func waitUntilListening(_ group: pid_t, port: UInt16, arguments: [String], log: String) throws {
        let deadline = ContinuousClock.now + .seconds(15)
        let foreignGrace = ContinuousClock.now + .seconds(2)
        while true {
            let reached = listeningSocketInodes(port: port, reachedFromIPv4Loopback: true)
            let ours = reached.filter { DevAccessTestSupport.processGroup(group, holdsOneOf: [$0]) }
            if !reached.isEmpty && ours == reached { return }
            var status: CInt = 0
            let exited = waitpid(group, &status, WNOHANG) == group
            // A foreign listener gets 2 s: the last gpsd on a reused port may still be exiting.
            if exited || (ours != reached && ContinuousClock.now > foreignGrace) || ContinuousClock.now > deadline {
                let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                kill(-group, SIGKILL)
                if !exited { _ = waitpid(group, &status, 0) }
                let other = ours != reached ? " (another process listens there)" : ""
                throw SetupError("\(arguments[0]) did not listen on port \(port)\(other); its output:\n\(output)")
            }
            usleep(20_000)
        }
    }

    /// Whether gpsd on 127.0.0.1:`port` lists a device in answer to `?DEVICES;`, asked
    /// again every 200 ms until `within` has passed.
    public static func listsADevice(port: UInt16, within: Duration) -> Bool {
        let deadline = ContinuousClock.now + within
        repeat {
            if let devices = askForDevices(port: port), devices.contains("\"path\"") { return true }
            usleep(200_000)
        } while ContinuousClock.now < deadline
        return false
    }

    /// The DEVICES line gpsd answers with, or nil when it did not within a second.
    private static func askForDevices(port: UInt16) -> String? {
        let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        guard withSockaddr(&address, { connect(fd, $0, $1) }) == 0 else { return nil }
        let request = Array("?DEVICES;\n".utf8)
        guard send(fd, request, request.count, CInt(MSG_NOSIGNAL)) == request.count else { return nil }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while received.count < 1 << 16 {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return nil }
            received += buffer[..<count]
            // Whole lines only: gpsd ends each with "\r\n".
            guard let lastNewline = received.lastIndex(of: 0x0a) else { continue }
            let lines = String(decoding: received[...lastNewline], as: UTF8.self).split(separator: "\n")
            if let line = lines.first(where: { $0.contains("\"class\":\"DEVICES\"") }) { return String(line) }
        }
        return nil
    }

    /// Kills the whole group and waits until none of it is left.
    private static func end(_ group: pid_t) {
        kill(-group, SIGKILL)
        var status: CInt = 0
        _ = waitpid(group, &status, 0)
        let gone = ContinuousClock.now + .seconds(5)
        while kill(-group, 0) == 0 && ContinuousClock.now < gone { usleep(10_000) }
    }

    public func stop() {
        kill(-processGroup, SIGTERM)
        var status: CInt = 0
        let deadline = ContinuousClock.now + .seconds(5)
        while waitpid(processGroup, &status, WNOHANG) == 0 {
            if ContinuousClock.now > deadline {
                kill(-processGroup, SIGKILL)
                _ = waitpid(processGroup, &status, 0)
                break
            }
            usleep(10_000)
        }
        // gpsd is gpsfake's child, not ours; make sure it goes with the group, and is gone
        // (its listener closed) before a test starts another gpsd on the same port.
        kill(-processGroup, SIGKILL)
        let gone = ContinuousClock.now + .seconds(5)
        while kill(-processGroup, 0) == 0 && ContinuousClock.now < gone { usleep(10_000) }
        unlink(logPath)
        // gpsd drops root before it exits, so it cannot remove its control socket from /tmp.
        for socket in controlSockets { unlink(socket) }
    }

    /// gpsfake names gpsd's control socket after its own pid; the bare gpsd gets ours.
    private var controlSockets: [String] {
        ["/tmp/gpsfake-\(processGroup).sock", NSTemporaryDirectory() + "gpsfake-\(processGroup).sock",
         Self.bareControlSocket(port)]
    }

    public static func bareControlSocket(_ port: UInt16) -> String {
        NSTemporaryDirectory() + "devaccess-gpsd-\(port).sock"
    }

    public static func executable(_ name: String) -> String? {
        if name.hasPrefix("/") { return access(name, X_OK) == 0 ? name : nil }
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }

    /// posix_spawn with POSIX_SPAWN_SETPGROUP, output to `log`, default signal handling.
    private static func spawnInOwnGroup(_ arguments: [String], log: String) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes,
                                 Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        posix_spawnattr_setpgroup(&attributes, 0)
        // The test runner's threads may block or ignore signals; gpsfake must get SIGTERM.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var environment = ProcessInfo.processInfo.environment
        // gpsfake looks for gpsd on PATH; Debian puts it in /usr/sbin.
        environment["PATH"] = (environment["PATH"].map { $0 + ":" } ?? "") + "/usr/sbin:/usr/bin:/sbin:/bin"
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { args -> CInt in
            envp.withUnsafeBufferPointer { env -> CInt in
                guard let args = args.baseAddress, let env = env.baseAddress else { return EINVAL }
                return posix_spawnp(&pid, arguments[0], &actions, &attributes, args, env)
            }
        }
        guard rc == 0 else { throw SetupError("cannot start \(arguments[0]): \(String(cString: strerror(rc)))") }
        return pid
    }
}

