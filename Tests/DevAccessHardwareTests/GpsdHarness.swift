import Testing
import Foundation
import Glibc
import Synchronization

// The gpsd harness shared by the location suites: gpsd fed by gpsfake, a client that waits
// for gpsd's fix, loopback servers that misbehave on purpose, and small socket helpers.

func fixture(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/gps/\(name)").path
}

func timed<T>(_ body: () throws -> T) rethrows -> (T, Duration) {
    let start = ContinuousClock.now
    let value = try body()
    return (value, ContinuousClock.now - start)
}

struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Deterministic "random" bytes (SplitMix64), so a failure can be reproduced.
func randomBytes(count: Int) -> [UInt8] {
    var state: UInt64 = 0x6770_7364_6761_7262
    return (0..<count).map { _ in
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return UInt8(truncatingIfNeeded: z ^ (z >> 31))
    }
}

/// A loopback port nobody listens on now: bind port 0, read the number, close.
func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestSetupError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = loopback(port: 0)
    guard withSockaddr(&address, { bind(fd, $0, $1) }) == 0 else {
        throw TestSetupError("bind: \(String(cString: strerror(errno)))")
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    guard withUnsafeMutablePointer(to: &address, {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }) == 0 else { throw TestSetupError("getsockname: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: address.sin_port)
}

func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

func withSockaddr(_ address: inout sockaddr_in, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt {
    withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

/// True once something listens on 127.0.0.1:`port`, read from /proc/net/tcp (what
/// `ss -Hltn` shows) so that no test connection is made: gpsfake starts its feed on
/// the first connection, and a probe connection would use up the log.
func isListening(port: UInt16) -> Bool {
    let hexPort = String(format: ":%04X", port)
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            // fields: sl local_address rem_address st ...; st 0A is LISTEN.
            if fields.count > 3, fields[1].hasSuffix(hexPort), fields[3] == "0A" { return true }
        }
    }
    return false
}

/// gpsd, fed through a pty by gpsfake from an NMEA log, on a free loopback port.
/// gpsfake and its gpsd run in their own process group, which `stop()` ends.
final class GpsFakeProcess: Sendable {
    static let isInstalled = executable("gpsfake") != nil && executable("gpsd") != nil
    static let skipMessage: Comment =
        "gpsfake is not installed: apt-get install gpsd gpsd-clients python3-gps to run the gpsd tests"

    let port: UInt16
    let processGroup: pid_t
    let logPath: String

    /// `gpsfake -1 -c 0.05 -P PORT -W 30 LOG`: one pass, 50 ms per sentence, exits 30 s
    /// after the log ends (we stop it long before).
    convenience init(log: String) throws {
        try self.init(log: log, port: try freeLoopbackPort())
    }

    /// The same on a chosen port: a gpsd restarted where the last one listened.
    convenience init(log: String, port: UInt16) throws {
        try self.init(port: port, arguments: ["gpsfake", "-1", "-c", "0.05", "-P", String(port), "-W", "30", log])
    }

    /// A bare gpsd with no device: `gpsd -N -S PORT`.
    convenience init(gpsdWithoutDevices: Void) throws {
        let port = try freeLoopbackPort()
        guard let gpsd = GpsFakeProcess.executable("gpsd") else { throw TestSetupError("gpsd not found") }
        try self.init(port: port, arguments: [gpsd, "-N", "-S", String(port),
                                              "-F", Self.bareControlSocket(port)])
    }

    private init(port: UInt16, arguments: [String]) throws {
        self.port = port
        logPath = NSTemporaryDirectory() + "devaccess-gpsfake-\(port).log"
        processGroup = try Self.spawnInOwnGroup(arguments, log: logPath)
        let deadline = ContinuousClock.now + .seconds(15)
        while !isListening(port: port) {
            var status: CInt = 0
            if waitpid(processGroup, &status, WNOHANG) == processGroup || ContinuousClock.now > deadline {
                let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                kill(-processGroup, SIGKILL)
                throw TestSetupError("\(arguments[0]) did not listen on port \(port); its output:\n\(log)")
            }
            usleep(20_000)
        }
    }

    func stop() {
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
        // gpsd is gpsfake's child, not ours; make sure it goes with the group.
        kill(-processGroup, SIGKILL)
        unlink(logPath)
        // gpsd drops root before it exits, so it cannot remove its control socket from /tmp.
        for socket in controlSockets { unlink(socket) }
    }

    /// gpsfake names gpsd's control socket after its own pid; the bare gpsd gets ours.
    private var controlSockets: [String] {
        ["/tmp/gpsfake-\(processGroup).sock", NSTemporaryDirectory() + "gpsfake-\(processGroup).sock",
         Self.bareControlSocket(port)]
    }

    static func bareControlSocket(_ port: UInt16) -> String {
        NSTemporaryDirectory() + "devaccess-gpsd-\(port).sock"
    }

    static func executable(_ name: String) -> String? {
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
        guard rc == 0 else { throw TestSetupError("cannot start \(arguments[0]): \(String(cString: strerror(rc)))") }
        return pid
    }
}

/// A watching client that waits until gpsd reports a TPV with `mode` meeting `until`,
/// then stays connected so gpsd keeps the receiver open (and its last fix cached)
/// while the probe under test runs.
final class GpsdTestWatcher: Sendable {
    let fd: CInt
    let devicePath: String

    init(port: UInt16, until condition: (Int) -> Bool) throws {
        (fd, devicePath) = try Self.watch(port: port, until: condition)
    }

    private static func watch(port: UInt16, until condition: (Int) -> Bool) throws -> (CInt, String) {
        let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket failed") }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        guard withSockaddr(&address, { Glibc.connect(fd, $0, $1) }) == 0 else {
            Glibc.close(fd)
            throw TestSetupError("watcher cannot connect to gpsd on port \(port)")
        }
        let watch = Array("?WATCH={\"enable\":true,\"json\":true};".utf8)
        _ = watch.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }

        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 8192)
        var seen: [String] = []
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { break }
            if count < 0 { continue }   // SO_RCVTIMEO: look at the clock again
            pending.append(contentsOf: chunk[..<count])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Data(pending[..<newline])
                pending.removeSubrange(...newline)
                guard let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any],
                      let kind = object["class"] as? String else { continue }
                seen.append(kind)
                if kind == "TPV", let mode = object["mode"] as? Int, condition(mode),
                   let device = object["device"] as? String {
                    return (fd, device)
                }
            }
        }
        Glibc.close(fd)
        throw TestSetupError("gpsd on port \(port) sent no matching TPV within 15 s; reports seen: \(seen)")
    }

    func close() { Glibc.close(fd) }
}

/// A loopback listener that misbehaves in one chosen way, on its own thread.
final class GpsdFakeServer: Sendable {
    enum Behavior: Sendable {
        /// Accept and never write.
        case silent
        /// Write these bytes, then close or hold the connection.
        case send([UInt8], thenClose: Bool)
        /// `prefix`, then `unit` again and again until the client hangs up.
        case endless(prefix: [UInt8], unit: [UInt8])

        /// "{" and then "a" forever, never a newline.
        static let endlessLine = Behavior.endless(prefix: Array("{".utf8),
                                                  unit: [UInt8](repeating: UInt8(ascii: "a"), count: 4096))
    }

    let port: UInt16
    /// Connections accepted so far: how often a client came (back).
    var accepted: Int { acceptedCount.load(ordering: .sequentiallyConsistent) }
    private let acceptedCount = Atomic<Int>(0)
    private let listener: CInt
    private let stopped = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    init(_ behavior: Behavior) throws {
        port = try freeLoopbackPort()
        listener = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var one: CInt = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size))
        var address = loopback(port: port)
        guard listener >= 0, withSockaddr(&address, { bind(listener, $0, $1) }) == 0, listen(listener, 8) == 0 else {
            if listener >= 0 { Glibc.close(listener) }
            throw TestSetupError("fake server cannot listen on port \(port): \(String(cString: strerror(errno)))")
        }
        let thread = Thread { [self] in serve(behavior) }
        thread.start()
    }

    func serve(_ behavior: Behavior) {
        var held: [CInt] = []
        defer {
            held.forEach { _ = Glibc.close($0) }
            finished.store(true, ordering: .sequentiallyConsistent)
        }
        while !stopped.load(ordering: .sequentiallyConsistent) {
            var request = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&request, 1, 20) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            acceptedCount.add(1, ordering: .sequentiallyConsistent)
            switch behavior {
            case .silent:
                held.append(client)
            case .send(let bytes, let thenClose):
                _ = bytes.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                if thenClose { Glibc.close(client) } else { held.append(client) }
            case .endless(let prefix, let unit):
                held.append(client)
                var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
                setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = prefix.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                var total = 0
                // Stops when the client hangs up (EPIPE/ECONNRESET) or after 64 MiB.
                while total < 64 << 20, !stopped.load(ordering: .sequentiallyConsistent) {
                    let sent = unit.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                    if sent > 0 { total += sent } else if errno != EAGAIN && errno != EINTR { break }
                }
            }
        }
    }

    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        while !finished.load(ordering: .sequentiallyConsistent) { usleep(5_000) }
        Glibc.close(listener)
    }
}
