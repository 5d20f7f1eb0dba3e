// devaccess-bench location (root, gpsd and gpsfake installed): how much later a fix
// reaches gpsd's clients through devaccessd's gpsd-compatible endpoint than straight from
// gpsd, with many clients watching. In one run:
//   - gpsfake feeds a real gpsd a log the bench writes (a fix every 0.25 s, each with its
//     own time, a slow walk, satellites), cycling;
//   - a real devaccessd watches that gpsd (--gpsd) and serves its endpoint (--location-port);
//     its watcher subscribes first, as it would be gpsd's only client in production;
//   - `--watchers` clients (default 100) watch through the endpoint, half at exact and half
//     at city accuracy, spread over users made for the run (the endpoint allows 16
//     connections per user); their sockets are created under those users' uids, which is
//     who the kernel says owns them;
//   - as many clients as gpsd has room for (at most `--watchers`) watch gpsd directly.
// One thread reads all sockets in one poll loop. Each TPV is matched to its fix by its
// `time` field; a fix's reference instant is when the first direct client received it.
// Two clocks: CLOCK_MONOTONIC read when poll returns (what the bench saw), and the kernel's
// receive time of the bytes (SO_TIMESTAMPNS: when they reached the client's socket, free of
// the bench's own scheduling).
import DevAccessCore
import Foundation
import Glibc
import Synchronization
import DevAccessSystem

/// Set by SIGINT/SIGTERM: the poll loop then fails, which removes the users and stops gpsd.
let locationBenchInterrupted = Atomic<Bool>(false)

extension HotplugBench {
    /// gpsd 3.22 as Debian builds it serves 64 subscribers; devaccessd's watcher is one.
    static let gpsdSubscriberSlots = 64
    /// The endpoint's per-user connection limit (GpsdCompatibleServer.Limits).
    static let endpointClientsPerUser = 16
    /// gpsfake's pause after each NMEA sentence; five sentences make one fix.
    static let sentenceDelay = 0.05

    /// `direct`: clients of gpsd itself (default: as many as gpsd has room for, at most `watchers`).
    func location(watchers: Int, direct wanted: Int?, fixes: Int) {
        let name = "a fix through devaccessd's endpoint to \(watchers) clients"
        guard getuid() == 0 else { return report.skip(name, "needs root (users for the clients, a root daemon)") }
        guard let gpsfake = findExecutable("gpsfake"), findExecutable("gpsd") != nil else {
            return report.skip(name, "needs gpsd and gpsfake (apt-get install gpsd gpsd-clients)")
        }
        defer { finish() }
        for signal in [SIGINT, SIGTERM] {
            _ = Glibc.signal(signal) { _ in locationBenchInterrupted.store(true, ordering: .relaxed) }
        }
        guard mkdir(work, 0o755) == 0 || errno == EEXIST else { fail("mkdir \(work): \(errnoText())") }
        let config = work + "/config"
        guard mkdir(config, 0o755) == 0 || errno == EEXIST else { fail("mkdir \(config): \(errnoText())") }
        let (feeder, gpsdPort) = startFakeGpsd(gpsfake, fixes: fixes)
        let plan = LocationClients(watchers: watchers, direct: min(wanted ?? watchers, Self.gpsdSubscriberSlots - 1),
                                   users: makeLocationUsers(watchers: watchers))
        let (daemonPID, endpointPort) = startEndpoint(gpsdPort: gpsdPort, config: config, users: plan.users)
        let idle = rss(daemonPID).current
        var clients = connectClients(plan, endpointPort: endpointPort, gpsdPort: gpsdPort)
        let serving = rss(daemonPID).current
        let measured = measureFixes(&clients, fixes: fixes, daemonPID: daemonPID,
                                    gpsdPID: childProcess(of: feeder, named: "gpsd"))
        var setup = "\(measured.times.count) fixes (one each \(5 * Self.sentenceDelay) s from gpsfake), \(plan.direct) "
            + "clients watching gpsd directly, \(watchers) through devaccessd's endpoint (\(watchers - plan.half) city, "
            + "\(plan.half) exact; \(plan.users.count) users); delay = when a client received fix F minus when the first "
            + "direct client did"
        if plan.direct < watchers && wanted == nil {
            setup += "; gpsd serves \(Self.gpsdSubscriberSlots) subscribers (its build's limit) and devaccessd's watcher "
                + "is one: \(plan.direct) direct clients, not \(watchers)"
        }
        reportFixes(measured, clients: clients, setup: setup)
        report.add("devaccessd RSS with \(watchers) clients, after \(measured.times.count) fixes",
                   Double(measured.loaded.current) / 1024, "MB",
                   anchor: "devaccessd RSS before the clients", Double(idle) / 1024,
                   note: "with the clients before the fixes \(format(serving)), high-water \(format(measured.loaded.peak))")
        for client in clients { close(client.descriptor) }
    }

    /// Who watches: `watchers` endpoint clients, half exact and half city, spread over
    /// `users` (the first half of them exact), and `direct` clients of gpsd.
    struct LocationClients {
        var watchers: Int
        var direct: Int
        var users: [(name: String, uid: UInt32, city: Bool)]
        /// Exact clients (the first `half` of the endpoint's).
        var half: Int { (watchers + 1) / 2 }
        var perLevel: Int { users.count / 2 }
    }

    /// gpsd fed by gpsfake, cycling a log long enough that no fix time repeats in a run;
    /// gpsfake's process group and gpsd's port, once it listens.
    func startFakeGpsd(_ gpsfake: String, fixes: Int) -> (feeder: pid_t, port: UInt16) {
        let log = work + "/walk.nmea"
        do {
            try NMEAWalk.text(epochs: max(600, fixes * 3)).write(toFile: log, atomically: true, encoding: .utf8)
        } catch {
            fail("cannot write the NMEA log: \(error)")
        }
        let gpsdPort = freePort()
        let feeder = spawnGroup([gpsfake, "-c", String(Self.sentenceDelay), "-P", String(gpsdPort), log],
                                output: work + "/gpsfake.log")
        cleanups.append {
            kill(-feeder, SIGTERM)
            usleep(200_000)
            kill(-feeder, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(feeder, &status, 0)
            unlink("/tmp/gpsfake-\(feeder).sock")
        }
        let listening = now() + 15_000_000_000
        while !isListening(gpsdPort) {
            if now() > listening { fail("gpsd did not listen on port \(gpsdPort); see \(work)/gpsfake.log") }
            usleep(20_000)
        }
        return (feeder, gpsdPort)
    }

    /// The users: the endpoint allows 16 connections per user, so 100 clients need 7 or
    /// more; the first half watch exact, the second city.
    func makeLocationUsers(watchers: Int) -> [(name: String, uid: UInt32, city: Bool)] {
        let half = (watchers + 1) / 2
        let perLevel = (half + Self.endpointClientsPerUser - 1) / Self.endpointClientsPerUser
        var users: [(name: String, uid: UInt32, city: Bool)] = []
        for index in 0..<(2 * perLevel) {
            let name = "dalocbench\(getpid() % 100_000)x\(index)"
            guard spawn("/usr/sbin/useradd", ["-r", "-M", "-N", "-g", "nogroup", "-s", "/usr/sbin/nologin", name]) else {
                fail("useradd \(name) failed")
            }
            cleanups.append { [unowned self] in _ = self.spawn("/usr/sbin/userdel", [name]) }
            guard let entry = getpwnam(name) else { fail("\(name) was made but getpwnam does not find it") }
            users.append((name, entry.pointee.pw_uid, index >= perLevel))
        }
        return users
    }

    /// devaccessd watching gpsd and serving its endpoint, each user granted location (at
    /// city accuracy for the city users); its pid and the endpoint's port.
    func startEndpoint(gpsdPort: UInt16, config: String,
                       users: [(name: String, uid: UInt32, city: Bool)]) -> (pid: Int32, port: UInt16) {
        let endpointPort = freePort()
        let environment = ["DEVACCESS_STATE_DIR": work + "/state", "DEVACCESS_SOCKET": work + "/broker.sock",
                           "DEVACCESS_CONFIG_DIR": config, "DEVACCESS_GPSD": "127.0.0.1:\(gpsdPort)"]
        let daemonProcess = startDaemon(environment: environment,
                                        extra: ["--gpsd", "127.0.0.1:\(gpsdPort)", "--gpsd-timeout", "2000",
                                                "--location-port", String(endpointPort), "--log-level", "warning"])
        daemon = daemonProcess
        let cli = here.appendingPathComponent("devaccess").path
        for user in users {
            guard spawn(cli, ["grant", "location", "--user", user.name] + (user.city ? ["--accuracy", "city"] : []),
                        environment: environment) else {
                fail("'devaccess grant location --user \(user.name)' failed")
            }
        }
        usleep(300_000)
        return (daemonProcess.processIdentifier, endpointPort)
    }

    /// Endpoint clients first: the first one starts devaccessd's gpsd watcher, which thereby
    /// becomes gpsd's first subscriber (in production it is gpsd's only one). Then the
    /// direct clients; every client has had a fix.
    func connectClients(_ plan: LocationClients, endpointPort: UInt16, gpsdPort: UInt16) -> [WatchingClient] {
        var clients: [WatchingClient] = []
        for index in 0..<plan.watchers {
            let user = plan.users[index < plan.half ? index % plan.perLevel : plan.perLevel + (index - plan.half) % plan.perLevel]
            clients.append(connectClient(port: endpointPort, owner: user.uid, viaDevaccessd: true, city: user.city))
            if index == 0 { awaitReports(&clients, timeoutSeconds: 30, what: "the first endpoint client's first fix") }
        }
        awaitReports(&clients, timeoutSeconds: 30, what: "a fix at every endpoint client")
        for _ in 0..<plan.direct {
            clients.append(connectClient(port: gpsdPort, owner: 0, viaDevaccessd: false, city: false))
        }
        awaitReports(&clients, timeoutSeconds: 30, what: "a fix at every client")
        return clients
    }

    /// The measured part's figures: the fixes measured, how long it took, the CPU ticks
    /// devaccessd and gpsd used, devaccessd's memory at the end.
    struct FixesMeasured {
        var times: [String]
        var elapsed: Double
        var daemonTicks: Int
        var gpsdTicks: Int
        var loaded: (current: Int, peak: Int)
    }

    /// Every byte of every socket, with both clocks, until `fixes` new fixes have reached
    /// every client.
    func measureFixes(_ clients: inout [WatchingClient], fixes: Int, daemonPID: Int32, gpsdPID: pid_t?) -> FixesMeasured {
        for index in clients.indices { clients[index].reset() }
        let cpuBefore = (cpuTicks(daemonPID), gpsdPID.map(cpuTicks) ?? 0)
        let began = now()
        let deadline = began + UInt64(Double(fixes) * 5 * Self.sentenceDelay * 4 * 1e9) + 30_000_000_000
        var complete = 0
        var lastCheck = began
        while complete < fixes + 1 {
            guard now() < deadline else {
                fail("only \(complete) fixes reached every client in time; see \(work)/daemon.log")
            }
            pollOnce(&clients, timeoutMilliseconds: 100)
            if now() - lastCheck > 200_000_000 {
                lastCheck = now()
                complete = completeFixes(clients).count
            }
        }
        let elapsed = Double(now() - began) / 1e9
        let cpuAfter = (cpuTicks(daemonPID), gpsdPID.map(cpuTicks) ?? 0)
        let loaded = rss(daemonPID)
        for client in clients where client.sawError {
            fail("a client got an ERROR report: \(String(decoding: client.bytes.prefix(300), as: UTF8.self))")
        }
        // The first complete fix may have started before the measurement began: dropped.
        let times = Array(completeFixes(clients).sorted().dropFirst().prefix(fixes))
        return FixesMeasured(times: times, elapsed: elapsed, daemonTicks: cpuAfter.0 - cpuBefore.0,
                             gpsdTicks: cpuAfter.1 - cpuBefore.1, loaded: loaded)
    }

    /// Per fix: the instant the first direct client had it, and every client's delay after
    /// it; bytes per client and fix by kind of client; CPU per fix.
    func reportFixes(_ measured: FixesMeasured, clients: [WatchingClient], setup: String) {
        var delivery = DeliveryReport()
        for time in measured.times {
            delivery.add(time, clients)
        }
        delivery.addRows(setup: setup)
        for (label, group) in [("direct", clients.filter { !$0.viaDevaccessd }),
                               ("endpoint exact", clients.filter { $0.viaDevaccessd && !$0.city }),
                               ("endpoint city", clients.filter { $0.viaDevaccessd && $0.city })] where !group.isEmpty {
            let figures = group.map { $0.perFix() }
            report.add("bytes per client and fix, \(label)", figures.map(\.bytes).reduce(0, +) / Double(group.count), "B",
                       note: String(format: "%.2f TPV reports per client and fix",
                                    figures.map(\.reports).reduce(0, +) / Double(group.count)))
        }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let perFix = { (used: Int) in Double(used) / ticks / Double(measured.times.count + 1) * 1000 }
        report.add("devaccessd CPU per fix", perFix(measured.daemonTicks), "ms", anchor: "gpsd CPU per fix",
                   perFix(measured.gpsdTicks),
                   note: String(format: "over %.1f s, /proc stat, %.0f Hz ticks", measured.elapsed, ticks))
    }

    // MARK: - Clients

    /// A watching client connected to `port`, its socket owned by `owner`. The socket is
    /// made with that effective uid (glibc's seteuid changes every thread's), which is the
    /// uid the kernel records for it; root switches back at once.
    func connectClient(port: UInt16, owner: UInt32, viaDevaccessd: Bool, city: Bool) -> WatchingClient {
        guard seteuid(owner) == 0 else { fail("seteuid(\(owner)): \(errnoText())") }
        let descriptor = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        let made = SystemCallError.current("socket")
        guard seteuid(0) == 0 else { fail("seteuid(0): \(errnoText())") }
        guard descriptor >= 0 else { fail("\(made)") }
        var one: CInt = 1
        setsockopt(descriptor, SOL_SOCKET, SO_TIMESTAMPNS, &one, socklen_t(MemoryLayout<CInt>.size))
        setsockopt(descriptor, CInt(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<CInt>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { fail("connect to port \(port): \(errnoText())") }
        let watch = Array("?WATCH={\"enable\":true,\"json\":true};\n".utf8)
        guard send(descriptor, watch, watch.count, Int32(MSG_NOSIGNAL)) == watch.count else {
            fail("cannot send ?WATCH: \(errnoText())")
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        return WatchingClient(descriptor: descriptor, viaDevaccessd: viaDevaccessd, city: city)
    }

    /// Reads until every client has received a TPV with a time.
    func awaitReports(_ clients: inout [WatchingClient], timeoutSeconds: Double, what: String) {
        let deadline = now() + UInt64(timeoutSeconds * 1e9)
        while clients.contains(where: { $0.firstFix().isEmpty }) {
            guard now() < deadline else {
                let silent = clients.filter { $0.firstFix().isEmpty }
                fail("no \(what) within \(Int(timeoutSeconds)) s (\(silent.count) clients without one; one got: "
                     + "\(String(decoding: silent[0].bytes.prefix(300), as: UTF8.self))); see \(work)/daemon.log")
            }
            pollOnce(&clients, timeoutMilliseconds: 100)
        }
    }

    /// One poll over every client; what is ready is read and stamped with the instant poll
    /// returned (the bytes were there by then) and the kernel's receive time.
    func pollOnce(_ clients: inout [WatchingClient], timeoutMilliseconds: Int32) {
        if locationBenchInterrupted.load(ordering: .relaxed) { fail("interrupted") }
        var descriptors = clients.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
        guard poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds) > 0 else { return }
        let woke = now()
        for index in clients.indices where descriptors[index].revents != 0 {
            guard clients[index].read(at: woke) else {
                fail("a client's connection ended: \(String(decoding: clients[index].bytes.suffix(300), as: UTF8.self))")
            }
        }
    }

    /// The fix times every client has received.
    func completeFixes(_ clients: [WatchingClient]) -> Set<String> {
        var common: Set<String>?
        for client in clients {
            let times = Set(client.arrivals().keys)
            common = common.map { $0.intersection(times) } ?? times
        }
        return common ?? []
    }

    // MARK: - Processes

    func findExecutable(_ name: String) -> String? {
        ["/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"].map { $0 + name }.first { access($0, X_OK) == 0 }
    }

    /// A loopback port nobody listens on now.
    func freePort() -> UInt16 {
        let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound else { fail("cannot find a free port: \(errnoText())") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// From /proc/net/tcp, so that no probe connection starts gpsfake's feed early.
    func isListening(_ port: UInt16) -> Bool {
        let suffix = String(format: ":%04X", port)
        guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
        return table.split(separator: "\n").dropFirst().contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 3 && fields[1].hasSuffix(suffix) && fields[3] == "0A"
        }
    }

    /// posix_spawn in a process group of its own (gpsfake and the gpsd it starts end together),
    /// output to `output`.
    func spawnGroup(_ arguments: [String], output: String) -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid = pid_t()
        guard posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ) == 0 else {
            fail("cannot start \(arguments[0])")
        }
        return pid
    }

    /// The first child of `parent` with that command name (gpsfake's gpsd).
    func childProcess(of parent: pid_t, named name: String) -> pid_t? {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid_t($0) }.first { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            let command = stat[stat.index(after: stat.firstIndex(of: "(") ?? stat.startIndex)..<close]
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return command == name && fields.count > 1 && pid_t(fields[1]) == parent
        }
    }

    /// utime + stime of a process, in clock ticks.
    func cpuTicks(_ pid: pid_t) -> Int {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15 (proc(5)).
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return 0 }
        return user + system
    }
}

/// One watching client: everything it received, with when.
struct WatchingClient {
    let descriptor: CInt
    let viaDevaccessd: Bool
    let city: Bool
    private(set) var bytes: [UInt8] = []
    /// Where each read ended in `bytes`, the monotonic instant poll returned, and the
    /// kernel's receive time of the last segment read (CLOCK_REALTIME), both in ns.
    private var reads: [(end: Int, woke: UInt64, kernel: UInt64)] = []
    private var buffer = [UInt8](repeating: 0, count: 65536)

    init(descriptor: CInt, viaDevaccessd: Bool, city: Bool) {
        self.descriptor = descriptor
        self.viaDevaccessd = viaDevaccessd
        self.city = city
    }

    var sawError: Bool {
        bytes.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) }.contains("\"class\":\"ERROR\"")
    }

    mutating func reset() {
        bytes = []
        reads = []
    }

    /// Reads what waits; false when the connection ended.
    mutating func read(at woke: UInt64) -> Bool {
        var control = [UInt64](repeating: 0, count: 16)
        while true {
            var kernel: UInt64 = 0
            let received = valueOrErrno { buffer.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { controlBytes in
                    var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                    return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                        var message = msghdr()
                        message.msg_iov = vectorPointer
                        message.msg_iovlen = 1
                        message.msg_control = controlBytes.baseAddress
                        message.msg_controllen = controlBytes.count
                        let count = recvmsg(descriptor, &message, Int32(MSG_DONTWAIT))
                        if count > 0 { kernel = Self.receiveTime(controlBytes, length: Int(message.msg_controllen)) }
                        return count
                    }
                }
            } }
            guard case .success(let count) = received else { return received == .failure(.wouldBlock) }
            if count == 0 { return false }
            bytes += buffer.prefix(count)
            reads.append((bytes.count, woke, kernel))
        }
    }

    /// SCM_TIMESTAMPNS from the control messages: cmsghdr is {size_t len; int level; int type}
    /// then the data, 8-byte aligned (the CMSG macros are not importable).
    private static func receiveTime(_ control: UnsafeMutableRawBufferPointer, length: Int) -> UInt64 {
        var offset = 0
        while offset + 16 <= length {
            let size = Int(control.load(fromByteOffset: offset, as: Int.self))
            let level = control.load(fromByteOffset: offset + 8, as: CInt.self)
            let type = control.load(fromByteOffset: offset + 12, as: CInt.self)
            if level == SOL_SOCKET, type == SO_TIMESTAMPNS, size >= 16 + 16 {
                let seconds = control.load(fromByteOffset: offset + 16, as: Int.self)
                let nanoseconds = control.load(fromByteOffset: offset + 24, as: Int.self)
                return UInt64(seconds) * 1_000_000_000 + UInt64(nanoseconds)
            }
            guard size >= 16 else { break }
            offset += (size + 7) & ~7
        }
        return 0
    }

    /// The first TPV of each fix time: when the read that completed its line happened.
    func arrivals() -> [String: (woke: UInt64, kernel: UInt64)] {
        var result: [String: (woke: UInt64, kernel: UInt64)] = [:]
        var start = 0
        var readIndex = 0
        let tpv = Array("\"class\":\"TPV\"".utf8), timeKey = Array("\"time\":\"".utf8)
        bytes.withUnsafeBufferPointer { all in
            while let newline = all[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = all[start..<newline]
                start = newline + 1
                while readIndex < reads.count && reads[readIndex].end <= newline { readIndex += 1 }
                guard readIndex < reads.count, Self.find(tpv, in: line) != nil,
                      let at = Self.find(timeKey, in: line) else { continue }
                let value = line[(at + timeKey.count)...].prefix { $0 != UInt8(ascii: "\"") }
                let time = String(decoding: value, as: UTF8.self)
                if result[time] == nil { result[time] = (reads[readIndex].woke, reads[readIndex].kernel) }
            }
        }
        return result
    }

    func firstFix() -> [String: (woke: UInt64, kernel: UInt64)] { arrivals() }

    /// TPV reports received per distinct fix, and bytes per distinct fix: how often the
    /// same fix was sent again.
    func perFix() -> (reports: Double, bytes: Double) {
        let fixes = Double(max(1, arrivals().count))
        let text = bytes.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) }
        return (Double(text.components(separatedBy: "\"class\":\"TPV\"").count - 1) / fixes, Double(bytes.count) / fixes)
    }

    private static func find(_ needle: [UInt8], in line: Slice<UnsafeBufferPointer<UInt8>>) -> Int? {
        guard line.count >= needle.count else { return nil }
        var index = line.startIndex
        while index + needle.count <= line.endIndex {
            if line[index] == needle[0], line[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}

/// Delays per fix and client, in ns, by path and by clock. Signed: when gpsd pauses between
/// writing to devaccessd's watcher and to its other clients, an endpoint client can have a
/// fix before the first direct client.
struct DeliveryReport {
    var direct: [Int64] = []
    var endpoint: [Int64] = []
    var endpointExact: [Int64] = []
    var endpointCity: [Int64] = []
    var directKernel: [Int64] = []
    var endpointKernel: [Int64] = []
    /// Per fix: the first and the last endpoint client's delay (the pipeline, and its fan-out).
    var firstEndpoint: [Int64] = []
    var lastEndpoint: [Int64] = []
    var lastDirect: [Int64] = []
    /// Per fix: the last endpoint client's delay minus the last direct client's (a stall of
    /// gpsd's shows in both and cancels out).
    var pairedLast: [Int64] = []

    mutating func add(_ time: String, _ clients: [WatchingClient]) {
        let arrivals = clients.map { $0.arrivals()[time] }
        let directs = zip(clients, arrivals).filter { !$0.0.viaDevaccessd }.compactMap { $0.1 }
        guard let reference = directs.map(\.woke).min(), let kernelReference = directs.map(\.kernel).min() else { return }
        var first = Int64.max, last = Int64.min, lastOfDirect = Int64.min
        for (client, arrival) in zip(clients, arrivals) {
            guard let arrival else { continue }
            let delay = Int64(bitPattern: arrival.woke &- reference)
            let kernelDelay = Int64(bitPattern: arrival.kernel &- kernelReference)
            if client.viaDevaccessd {
                endpoint.append(delay)
                endpointKernel.append(kernelDelay)
                if client.city { endpointCity.append(delay) } else { endpointExact.append(delay) }
                first = min(first, delay)
                last = max(last, delay)
            } else {
                direct.append(delay)
                directKernel.append(kernelDelay)
                lastOfDirect = max(lastOfDirect, delay)
            }
        }
        firstEndpoint.append(first)
        lastEndpoint.append(last)
        lastDirect.append(lastOfDirect)
        pairedLast.append(last - lastOfDirect)
    }

    /// Milliseconds at percentile `p` of `sorted` (nearest rank).
    static func at(_ sorted: [Int64], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return Double(sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]) / 1e6
    }

    func addRows(setup: String) {
        func p(_ values: [Int64], _ q: Double) -> Double { Self.at(values.sorted(), q) }
        let goal = BenchGoal.excessBelow(1, "added p99 < 1 ms")
        // The kernel's receive time of the bytes (SO_TIMESTAMPNS) is the faithful clock; the
        // monotonic clock at the poll wake-up compresses delays while the bench reads others.
        report.add("endpoint delivery p50, kernel clock (\(endpoint.count) deliveries)", p(endpointKernel, 0.5), "ms",
                   anchor: "gpsd direct p50, kernel clock", p(directKernel, 0.5), note: setup)
        report.add("endpoint delivery p99, kernel clock", p(endpointKernel, 0.99), "ms",
                   anchor: "gpsd direct p99, kernel clock", p(directKernel, 0.99), goal: goal)
        report.add("endpoint delivery p50, monotonic clock at wake-up", p(endpoint, 0.5), "ms",
                   anchor: "gpsd direct p50, monotonic", p(direct, 0.5),
                   note: String(format: "exact clients p50 %.3f ms, city clients p50 %.3f ms", p(endpointExact, 0.5),
                                p(endpointCity, 0.5)))
        report.add("endpoint delivery p99, monotonic clock at wake-up", p(endpoint, 0.99), "ms",
                   anchor: "gpsd direct p99, monotonic", p(direct, 0.99), goal: goal)
        report.add("per fix: first endpoint client p50 (one hop)", p(firstEndpoint, 0.5), "ms")
        report.add("per fix: last endpoint client p50", p(lastEndpoint, 0.5), "ms",
                   anchor: "per fix: last direct client p50", p(lastDirect, 0.5),
                   note: String(format: "last endpoint minus last direct client: p99 %+.3f ms, max %+.3f ms",
                                p(pairedLast, 0.99), p(pairedLast, 1.0)))
    }
}

/// An NMEA log of a slow walk north: GGA, GSA, two GSV and RMC per one-second epoch, each
/// epoch with its own time, so that every TPV gpsd makes can be told apart.
enum NMEAWalk {
    static func text(epochs: Int) -> String {
        var out = "# devaccess-bench location: \(epochs) epochs of a walk north at 1 m/s\n"
        let satellites = [(4, 40, 83, 46), (5, 12, 160, 38), (9, 63, 290, 44), (12, 25, 20, 41),
                          (17, 51, 210, 45), (24, 8, 330, 30), (25, 33, 115, 42), (29, 70, 45, 47)]
        for epoch in 0..<epochs {
            let time = String(format: "%02d%02d%02d.00", 12 + epoch / 3600, (epoch / 60) % 60, epoch % 60)
            // 1 m is 0.00054 minutes of latitude.
            let latitude = String(format: "48%06.3f", 7.038 + Double(epoch) * 0.00054)
            out += sentence("GPGGA,\(time),\(latitude),N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")
            out += sentence("GPGSA,A,3,04,05,09,12,17,24,25,29,,,,,2.5,1.3,2.1")
            for group in 0..<2 {
                let fields = satellites[(group * 4)..<(group * 4 + 4)].map {
                    String(format: "%02d,%02d,%03d,%02d", $0.0, $0.1, $0.2, $0.3)
                }.joined(separator: ",")
                out += sentence("GPGSV,2,\(group + 1),08,\(fields)")
            }
            out += sentence("GPRMC,\(time),A,\(latitude),N,01131.000,E,002.0,000.0,150624,003.1,W")
        }
        return out
    }

    /// $BODY*CS, CS the XOR of the body's characters.
    static func sentence(_ body: String) -> String {
        let checksum = body.utf8.reduce(UInt8(0)) { $0 ^ $1 }
        return "$" + body + String(format: "*%02X\r\n", checksum)
    }
}
