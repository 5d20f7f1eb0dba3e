// devaccess-bench hotplug: how long a re-created device node waits for its grant's
// ACL entry with the daemon running, against a plain `setfacl -m` on the same node in
// the same run; and how long after its expiry a timed grant's entry is removed.
//
// The node is declared to the daemon (DEVACCESS_TEST_DEVICES, honoured by DEBUG builds
// only), so the event is the daemon's inotify on the node's directory, not udev's: the
// VM measures the udev path (Tests/UseCase/VM). For optimized figures with the test hook:
//   swift build -c release -Xswiftc -DDEBUG && sudo .build/release/devaccess-bench hotplug
import DevAccessProtocol
import Foundation
import Glibc
import DevAccessSystem

final class HotplugBench {
    /// The grantee: `nobody`, so no user is created.
    static let uid: UInt32 = 65534
    /// A second uid, for the setfacl comparison (an entry the daemon does not manage).
    static let otherUID: UInt32 = 65533

    let work = NSTemporaryDirectory() + "devaccess-bench-hotplug-\(getpid())"
    var daemon: Process?
    /// More to undo at the end (processes, users), run last first after the daemon stops.
    var cleanups: [() -> Void] = []

    /// Ends the daemon and removes the scratch directory, then exits: every failure path.
    func fail(_ message: String) -> Never {
        finish()
        devaccess_bench.fail(message)
    }

    func finish() {
        if let daemon {
            kill(daemon.processIdentifier, SIGTERM)
            daemon.waitUntilExit()
        }
        daemon = nil
        for cleanup in cleanups.reversed() { cleanup() }
        cleanups = []
        try? FileManager.default.removeItem(atPath: work)
    }

    func run(samples: Int, expiries: Int) {
        report.skip("replug -> ACL entry (udev), against udevd finishing its rules", "measured by the VM scenario "
                    + "hotplug-acl (Tests/UseCase/VM, TCG): docs/performance.md", goal: .ratioBelow(1.2, "within 1.2x udevd"))
        guard getuid() == 0 else { return skipNeedsRoot("mknod -> ACL entry by devaccessd") }
        defer { finish() }
        let (nodes, node, environment) = declareCamera(id: "camera:bench-hotplug")
        daemon = startDaemon(environment: environment)
        let log = work + "/daemon.log"
        guard honoursTestDevices() else { return skipNoTestHook("mknod -> ACL entry by devaccessd") }
        let cli = here.appendingPathComponent("devaccess").path
        guard spawn(cli, ["grant", "camera", "--user", String(Self.uid)], environment: environment) else {
            fail("'devaccess grant' failed")
        }
        let watch = AttributeWatch(directory: nodes, name: "video0", bench: self)

        var hotplug: [UInt64] = []
        var setfacl: [UInt64] = []
        for _ in 0..<samples {
            // Removal first, settled, as a real unplug comes well before the next plug.
            unlink(node)
            usleep(20_000)
            watch.drain()
            let start = now()
            makeNode(node)
            guard watch.waitForChange(timeoutMilliseconds: 2000) else {
                fail("no ACL change on \(node) within 2 s of mknod; see \(log)")
            }
            hotplug.append(now() - start)
            guard aclLine(node).contains("user:\(Self.uid):rw-") else { fail("the entry is not there: \(aclLine(node))") }

            // The standard tool on the same node, also one entry added: process start included,
            // as a udev rule's RUN+="/usr/bin/setfacl ..." would pay it.
            let began = now()
            guard spawn("/usr/bin/setfacl", ["-m", "u:\(Self.otherUID):rw", node]) else {
                fail("setfacl failed (apt install acl)")
            }
            setfacl.append(now() - began)
            _ = spawn("/usr/bin/setfacl", ["-x", "u:\(Self.otherUID)", node])
        }
        let plug = hotplug.sorted(), tool = setfacl.sorted()
        let setfaclName = "setfacl -m (process) on the same node"
        report.add("mknod -> ACL entry by devaccessd p50 (\(samples) re-created nodes)", percentile(plug, 0.5) / 1000, "ms",
                   anchor: setfaclName + " p50", percentile(tool, 0.5) / 1000,
                   note: "rm, 20 ms, mknod; inotify on the node's directory (declared node), not udev")
        report.add("mknod -> ACL entry by devaccessd p99", percentile(plug, 0.99) / 1000, "ms",
                   anchor: setfaclName + " p99", percentile(tool, 0.99) / 1000)
        let inside = daemonLatencies(log)
        if !inside.isEmpty {
            report.add("daemon's own view (inotify wake -> run done) p50", inside[inside.count / 2], "ms",
                       anchor: setfaclName + " p50", percentile(tool, 0.5) / 1000,
                       note: String(format: "p99 %.2f ms", inside[min(inside.count - 1, Int(Double(inside.count) * 0.99))]))
        }
        if expiries > 0 { measureExpiries(expiries, node: node, cli: cli, environment: environment, watch: watch) }
    }

    /// Timed grants of 1 s, one after another: when is the entry gone, relative to the
    /// expiry the ledger stores? No command runs in between; the daemon's timer does it.
    func measureExpiries(_ count: Int, node: String, cli: String, environment: [String: String],
                                watch: AttributeWatch) {
        var late: [Double] = []
        for _ in 0..<count {
            guard spawn(cli, ["grant", "camera", "--user", String(Self.uid), "--for", "1s"], environment: environment) else {
                fail("'devaccess grant --for 1s' failed")
            }
            watch.drain()
            guard let expiry = latestExpiry(environment["DEVACCESS_STATE_DIR"] ?? "") else {
                report.skip("expiry -> entry removed", SQLiteTool.missing)
                return
            }
            guard watch.waitForChange(timeoutMilliseconds: 5000) else { fail("the timed grant's entry stayed") }
            let removed = Date()
            guard !aclLine(node).contains("user:\(Self.uid):") else { fail("an ACL change, but the entry is still there") }
            late.append(removed.timeIntervalSince(expiry) * 1000)
        }
        late.sort()
        report.add("expiry -> entry removed p50 (\(count) timed grants of 1 s, no command)", late[late.count / 2], "ms",
                   note: String(format: "max %.2f ms, min %.2f ms (negative = early)", late[late.count - 1], late[0]))
    }

    // MARK: - Helpers

    func skipNeedsRoot(_ name: String) {
        report.skip(name, "needs root (mknod, ACLs, a root daemon)")
    }

    func skipNoTestHook(_ name: String) {
        report.skip(name, "this devaccessd ignores DEVACCESS_TEST_DEVICES (a release build): build with "
                        + "'swift build -c release -Xswiftc -DDEBUG' or use the debug build")
    }

    /// Whether the daemon just started logged that it serves the declared test devices.
    func honoursTestDevices() -> Bool {
        (try? String(contentsOfFile: work + "/daemon.log", encoding: .utf8))?.contains("TEST ONLY") == true
    }

    var here: URL {
        URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "")
            .deletingLastPathComponent()
    }

    func startDaemon(environment: [String: String], extra: [String] = []) -> Process {
        let process = Process()
        process.executableURL = here.appendingPathComponent("devaccessd")
        process.arguments = ["--socket", work + "/broker.sock", "--log-target", "stderr", "--log-level", "info"] + extra
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        _ = FileManager.default.createFile(atPath: work + "/daemon.log", contents: nil)
        guard let log = FileHandle(forWritingAtPath: work + "/daemon.log") else { fail("cannot create the daemon log") }
        process.standardError = log
        process.standardOutput = log
        do { try process.run() } catch { fail("cannot start devaccessd: \(error)") }
        // finish() stops it, on every path (a skipped section's too).
        daemon = process
        for _ in 0..<250 {
            if (try? BrokerClient(socketPath: work + "/broker.sock", timeout: .seconds(1)).hello()) != nil { return process }
            usleep(20_000)
        }
        fail("devaccessd did not come up")
    }

    /// A camera node (mknod 1:3) declared to the daemon and the CLI in the scratch
    /// directory, and the environment that points both at it and at this run's daemon.
    func declareCamera(id: String) -> (nodes: String, node: String, environment: [String: String]) {
        let nodes = work + "/nodes"
        let node = nodes + "/video0"
        for directory in [work, nodes] {
            guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { fail("mkdir \(directory): \(errnoText())") }
        }
        makeNode(node)
        let declaration = "{\"devices\":[{\"permission\":\"camera\",\"id\":\"\(id)\","
            + "\"name\":\"bench camera\",\"nodes\":[{\"path\":\"\(node)\",\"major\":1,\"minor\":3}]}]}"
        do {
            try declaration.write(toFile: work + "/devices.json", atomically: true, encoding: .utf8)
        } catch {
            fail("cannot write the declaration: \(error)")
        }
        // The CLI's decisions go through this daemon (the one writer): its socket.
        return (nodes, node, ["DEVACCESS_TEST_DEVICES": work + "/devices.json", "DEVACCESS_STATE_DIR": work + "/state",
                              "DEVACCESS_GPSD": "127.0.0.1:9", "DEVACCESS_SOCKET": work + "/broker.sock"])
    }

    /// glibc's makedev() (a macro Swift cannot import).
    func makeNode(_ path: String) {
        let device = dev_t(((1 & 0xfff) << 8) | (3 & 0xff))
        guard mknod(path, S_IFCHR | 0o600, device) == 0 else { fail("mknod \(path): \(errnoText())") }
    }

    func errnoText() -> String { Errno.current.message }

    /// posix_spawn + wait, output discarded (Foundation's Process costs tens of ms here,
    /// which would be charged to setfacl). True when it exited 0.
    func spawn(_ program: String, _ arguments: [String], environment: [String: String] = [:]) -> Bool {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var pid = pid_t()
        guard posix_spawn(&pid, program, &actions, nil, argv, envp) == 0 else { return false }
        var status: Int32 = 0
        _ = valueOrErrno { waitpid(pid, &status, 0) }
        return status & 0x7f == 0 && (status >> 8) & 0xff == 0
    }

    /// `getfacl -n -c` of the node in one line (outside the timed part).
    func aclLine(_ path: String) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/getfacl")
        process.arguments = ["-n", "-c", "-p", path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return "" }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").joined(separator: " ")
    }

    func latestExpiry(_ stateDirectory: String) -> Date? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [stateDirectory + "/ledger.db", "SELECT MAX(expires_usec) FROM grants"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard let micro = Double(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        else { return nil }
        return Date(timeIntervalSince1970: micro / 1_000_000)
    }

    /// `event_to_done_ms` of the daemon's `trigger=nodes` runs that changed something, sorted.
    func daemonLatencies(_ log: String) -> [Double] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").filter { $0.contains("trigger=nodes") && $0.contains("changes=1") }
            .compactMap { line in
                line.split(separator: " ").first { $0.hasPrefix("event_to_done_ms=") }
                    .flatMap { Double($0.dropFirst("event_to_done_ms=".count)) }
            }.sorted()
    }
}

/// inotify IN_ATTRIB on one entry of a directory: an ACL edit (setxattr) on the node.
final class AttributeWatch {
    private let descriptor: CInt
    private let name: String

    init(directory: String, name: String, bench: HotplugBench) {
        descriptor = inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK))
        self.name = name
        guard descriptor >= 0, inotify_add_watch(descriptor, directory, UInt32(IN_ATTRIB)) >= 0 else {
            bench.fail("inotify on \(directory): \(Errno.current)")
        }
    }

    deinit { close(descriptor) }

    func drain() { _ = read(blockingFor: 0) }

    /// Waits for the next attribute change of the entry.
    func waitForChange(timeoutMilliseconds: Int32) -> Bool {
        let deadline = now() + UInt64(timeoutMilliseconds) * 1_000_000
        while now() < deadline {
            if read(blockingFor: Int32((deadline - now()) / 1_000_000) + 1) { return true }
        }
        return false
    }

    private func read(blockingFor milliseconds: Int32) -> Bool {
        var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        guard poll(&descriptors, 1, milliseconds) > 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var seen = false
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { return seen }
            var offset = 0
            buffer.withUnsafeBytes { raw in
                while offset + 16 <= count {
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let bytes = raw[(offset + 16)..<min(count, offset + 16 + length)]
                    if String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self) == name { seen = true }
                    offset += 16 + length
                }
            }
        }
    }
}
