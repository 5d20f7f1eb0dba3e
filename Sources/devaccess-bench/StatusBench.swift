// devaccess-bench status: the broker's status round trip (p50/p99), requests per second
// with many clients, and the daemon's memory idle and under load. It starts the devaccessd
// next to it on a temporary socket and state directory (or uses --socket PATH of a running
// one), and measures in the same run the nearest standard alternatives: a cold
// `devaccess status` process (what a client does without the broker) and a bare
// Unix-socket echo round trip (the transport floor). Also the helpers the other daemon
// sections share: now(), percentile(), rss().
import DevAccessCore
import DevAccessProtocol
import Foundation
import Glibc
import Synchronization
import DevAccessInterface

func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

func percentile(_ sorted: [UInt64], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
    return Double(sorted[max(0, index)]) / 1000
}

/// Proportional and private (unshared) memory, from /proc/PID/smaps_rollup, in KiB.
func sharedAccounting(_ pid: Int32) -> (pss: Int, privateKiB: Int) {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        text.split(separator: "\n").first { $0.hasPrefix(name + ":") }
            .flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? 0
    }
    return (field("Pss"), field("Private_Clean") + field("Private_Dirty"))
}

func rss(_ pid: Int32) -> (current: Int, peak: Int) {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        text.split(separator: "\n").first { $0.hasPrefix(name + ":") }
            .flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? 0
    }
    return (field("VmRSS"), field("VmHWM"))
}

func format(_ kib: Int) -> String { String(format: "%.1f MB", Double(kib) / 1024) }

/// Sequential round trips on one connection; latencies in nanoseconds, sorted.
func roundTrips(_ socket: String, _ request: Request, count: Int) -> [UInt64] {
    do {
        let client = try BrokerClient(socketPath: socket)
        for _ in 0..<50 { _ = try client.send(request) }  // warm up
        var samples: [UInt64] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = now()
            let reply = try client.send(request)
            samples.append(now() - start)
            if case .error(let error) = reply { fail("error reply: \(error)") }
        }
        return samples.sorted()
    } catch {
        fail("\(error)")
    }
}

/// A status client that only moves bytes: it writes one encoded status request and reads
/// until the reply's newline, decoding nothing after the first reply (which it checks). With
/// it the load rows show what devaccessd serves, not what the client library's decoder costs
/// (on 2 cores the decoding clients used about 40 µs of CPU per status, more than devaccessd).
final class RawStatusClient {
    private let descriptor: CInt
    private let request = MessageCodec.encode(RequestEnvelope(id: 1, request: .status(StatusQuery()))) + [0x0a]
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)
    private var pending: [UInt8] = []

    init?(socketPath: String) {
        descriptor = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socketPath.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { close(descriptor); return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0, let first = roundTrip(),
              case .status = (try? MessageCodec.decodeReply(first))?.reply else { close(descriptor); return nil }
    }

    deinit { close(descriptor) }

    /// One request written, one reply line read; nil when the connection failed.
    func roundTrip() -> [UInt8]? {
        guard request.withUnsafeBytes({ send(descriptor, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }) == request.count
        else { return nil }
        while true {
            if let newline = pending.firstIndex(of: 0x0a) {
                let line = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                return line
            }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            guard count > 0 else { return nil }
            pending += buffer[..<count]
        }
    }
}

/// `clients` connections, one thread each, sending status requests for `seconds`; `raw`
/// clients move bytes only (RawStatusClient), the others go through BrokerClient.
func load(_ socket: String, clients: Int, seconds: Double, daemon: Int32?, raw: Bool = false)
    -> (perSecond: Double, p50: Double, p99: Double, peakRSS: Int, errors: Int) {
    let results = Mutex<[UInt64]>([])
    let errors = Atomic<Int>(0)
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    let deadline = Mutex<UInt64>(0)
    for _ in 0..<clients {
        done.enter()
        Thread {
            defer { done.leave() }
            let send: () -> Bool
            if raw {
                guard let client = RawStatusClient(socketPath: socket) else {
                    errors.add(1, ordering: .relaxed)
                    return
                }
                send = { client.roundTrip() != nil }
            } else {
                guard let client = try? BrokerClient(socketPath: socket, timeout: .seconds(30)) else {
                    errors.add(1, ordering: .relaxed)
                    return
                }
                send = {
                    guard let reply = try? client.send(.status(StatusQuery())) else { return false }
                    if case .error = reply { errors.add(1, ordering: .relaxed) }
                    return true
                }
            }
            start.wait()
            let end = deadline.withLock { $0 }
            var local: [UInt64] = []
            while now() < end {
                let began = now()
                guard send() else {
                    errors.add(1, ordering: .relaxed)
                    return
                }
                local.append(now() - began)
            }
            results.withLock { $0 += local }
        }.start()
    }
    usleep(200_000)  // let every thread connect
    let began = now()
    deadline.withLock { $0 = began + UInt64(seconds * 1e9) }
    for _ in 0..<clients { start.signal() }
    var peak = 0
    while done.wait(timeout: .now() + 0.05) == .timedOut {
        if let daemon { peak = max(peak, rss(daemon).current) }
    }
    let elapsed = Double(now() - began) / 1e9
    let samples = results.withLock { $0 }.sorted()
    return (Double(samples.count) / elapsed, percentile(samples, 0.5), percentile(samples, 0.99), peak,
            errors.load(ordering: .relaxed))
}

/// A bare echo server on a Unix socket, answered by one thread: the transport floor.
func echoFloor(count: Int) -> (p50: Double, p99: Double) {
    let directory = NSTemporaryDirectory() + "devaccess-bench-echo-\(getpid())"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let path = directory + "/echo.sock"
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let server = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    listen(server, 4)
    Thread {
        let connection = accept(server, nil, nil)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(connection, &buffer, buffer.count, 0)
            if count <= 0 { break }
            _ = send(connection, buffer, count, 0)
        }
        close(connection)
    }.start()
    let client = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0)
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    let message = MessageCodec.encode(RequestEnvelope(id: 1, request: .hello)) + [0x0a]
    var buffer = [UInt8](repeating: 0, count: 65536)
    var samples: [UInt64] = []
    for _ in 0..<count {
        let start = now()
        _ = send(client, message, message.count, 0)
        _ = recv(client, &buffer, buffer.count, 0)
        samples.append(now() - start)
    }
    close(client)
    close(server)
    let sorted = samples.sorted()
    return (percentile(sorted, 0.5), percentile(sorted, 0.99))
}

/// Median wall time of a cold `devaccess status --json` process, in microseconds.
///
/// posix_spawn + waitpid (Shell.run), not Foundation's Process: its waitUntilExit polls
/// its run loop every 50 ms, which put about 50 ms into every sample.
func coldStatus(_ binary: String, runs: Int) -> Double? {
    guard FileManager.default.isExecutableFile(atPath: binary) else { return nil }
    var samples: [UInt64] = []
    for _ in 0..<runs {
        let start = now()
        guard Shell.run(binary, ["status", "--json", "--gpsd", "127.0.0.1:9"]) else { return nil }
        samples.append(now() - start)
    }
    return percentile(samples.sorted(), 0.5)
}

// MARK: - The section

/// The devaccess and devaccessd next to this program.
var benchDirectory: URL {
    URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "")
        .deletingLastPathComponent()
}

func statusSection(_ options: BenchOptions) {
    let here = benchDirectory
    let started = options.socket == nil ? startStatusDaemon(here) : nil
    defer {
        if let started {
            kill(started.daemon.processIdentifier, SIGTERM)
            started.daemon.waitUntilExit()
            try? FileManager.default.removeItem(atPath: started.stateDirectory)
        }
    }
    let socketPath = started?.socketPath ?? options.socket ?? ""
    let pid = started?.daemon.processIdentifier
    if let pid {
        usleep(500_000)
        let shared = sharedAccounting(pid)
        report.add("daemon RSS idle", Double(rss(pid).current) / 1024, "MB", goal: statusRSSGoal,
                   note: "PSS \(format(shared.pss)), private \(format(shared.privateKiB)); the rest is shared library text")
    } else {
        report.skip("daemon RSS", "--socket: a devaccessd this run did not start")
    }
    let floor = reportRoundTrips(socketPath, options, cli: here.appendingPathComponent("devaccess").path)
    for clients in options.clients {
        reportLoad(socketPath, clients: clients, seconds: options.seconds, daemon: pid, floor: floor)
    }
    if let pid {
        usleep(300_000)
        let memory = rss(pid)
        let shared = sharedAccounting(pid)
        report.add("daemon RSS after load", Double(memory.current) / 1024, "MB", goal: statusRSSGoal,
                   note: "high-water \(format(memory.peak)), PSS \(format(shared.pss)), private \(format(shared.privateKiB))")
    }
}

let statusRSSGoal = BenchGoal.below(15, "< 15 MB")

/// A devaccessd of this run's, in a state directory of its own, once it answers hello.
func startStatusDaemon(_ here: URL) -> (daemon: Process, socketPath: String, stateDirectory: String) {
    let stateDirectory = NSTemporaryDirectory() + "devaccess-bench-status-\(getpid())"
    try? FileManager.default.createDirectory(atPath: stateDirectory, withIntermediateDirectories: true)
    let socketPath = stateDirectory + "/broker.sock"
    let process = Process()
    process.executableURL = here.appendingPathComponent("devaccessd")
    process.arguments = ["--socket", socketPath, "--state-dir", stateDirectory + "/state", "--gpsd", "127.0.0.1:9",
                         "--log-level", "warning", "--log-target", "stderr"]
    do { try process.run() } catch { fail("cannot start \(process.executableURL?.path ?? "devaccessd"): \(error)") }
    var up = false
    for _ in 0..<200 where !up {
        up = (try? BrokerClient(socketPath: socketPath, timeout: .seconds(1)).hello()) != nil
        if !up { usleep(20_000) }
    }
    if !up { fail("devaccessd did not come up") }
    return (process, socketPath, stateDirectory)
}

/// Sequential round trips against the bare socket's echo floor, and a cold CLI's status;
/// the floor.
func reportRoundTrips(_ socketPath: String, _ options: BenchOptions, cli: String) -> (p50: Double, p99: Double) {
    let floor = echoFloor(count: options.sequential)
    let hello = roundTrips(socketPath, .hello, count: options.sequential)
    let status = roundTrips(socketPath, .status(StatusQuery()), count: options.sequential)
    let camera = roundTrips(socketPath, .status(StatusQuery(permissions: [.camera])), count: options.sequential)
    let echo50 = "echo round trip p50 (bare Unix socket, the floor)", echo99 = "echo round trip p99"
    report.add("hello round trip p50 (\(options.sequential) sequential)", percentile(hello, 0.5), "µs",
               anchor: echo50, floor.p50)
    report.add("status (all) round trip p50", percentile(status, 0.5), "µs", anchor: echo50, floor.p50,
               goal: .below(50, "< 50 µs"))
    report.add("status (all) round trip p99", percentile(status, 0.99), "µs", anchor: echo99, floor.p99)
    report.add("status (camera) round trip p50", percentile(camera, 0.5), "µs", anchor: echo50, floor.p50)
    if let cold = coldStatus(cli, runs: 20) {
        report.add("cold `devaccess status --json` process p50", cold, "µs", anchor: "status (all) round trip p50",
                   percentile(status, 0.5), note: "what a client pays without the broker")
    } else {
        report.skip("cold `devaccess status` process", "no devaccess next to the bench")
    }
    return floor
}

/// `clients` connections asking status for `seconds`, against one connection of the echo
/// server as requests per second (what one client can reach).
func reportLoad(_ socketPath: String, clients: Int, seconds: Double, daemon pid: Int32?, floor: (p50: Double, p99: Double)) {
    let echoRate = floor.p50 > 0 ? 1e6 / floor.p50 : 0
    let echo99 = "echo round trip p99"
    let result = load(socketPath, clients: clients, seconds: seconds, daemon: pid)
    let errors = result.errors == 0 ? nil : "\(result.errors) error(s)"
    report.add("\(clients) clients, status (all), \(seconds) s", result.perSecond, "req/s",
               anchor: "echo floor, 1 connection (1 / p50)", echoRate,
               goal: clients == 16 ? .above(50_000, ">= 50,000 req/s") : nil, note: errors)
    report.add("\(clients) clients, status (all) p99", result.p99, "µs", anchor: echo99, floor.p99,
               goal: clients == 200 ? .below(1000, "< 1 ms") : nil, note: String(format: "p50 %.1f µs", result.p50))
    if clients == 16 {
        // The same load from clients that decode nothing: what devaccessd itself serves.
        let bytes = load(socketPath, clients: clients, seconds: seconds, daemon: pid, raw: true)
        report.add("\(clients) raw clients (no reply decoding), status (all), \(seconds) s", bytes.perSecond,
                   "req/s", anchor: "echo floor, 1 connection (1 / p50)", echoRate,
                   goal: .above(50_000, ">= 50,000 req/s"),
                   note: String(format: "p50 %.1f µs, p99 %.1f µs", bytes.p50, bytes.p99)
                       + (bytes.errors == 0 ? "" : ", \(bytes.errors) error(s)"))
    }
    if pid != nil {
        report.add("\(clients) clients: daemon RSS peak", Double(result.peakRSS) / 1024, "MB", goal: statusRSSGoal)
    }
}
