import Foundation
import Testing
import Glibc
import DevAccessProtocol
import DevAccessLedger
import DevAccessTestSupport

/// The real `devaccessd` binary from the build directory, started for one test on a
/// socket and state directory of its own, as root.
final class RunningDaemon: @unchecked Sendable {
    static var binary: String {
        URL(fileURLWithPath: TestProcess.devaccessBinary).deletingLastPathComponent()
            .appendingPathComponent("devaccessd").path
    }

    let directory: TemporaryDirectory
    let socketPath: String
    let stateDirectory: String
    let logPath: String
    let process: Process

    /// A run's group id is its row id in the ledger plus RunGroups' base: one devaccessd
    /// hands each out once, but the daemons of parallel tests all start at 1, and ending one
    /// test's run (`revoke --terminate`, a restart ending its runs) signals every process with
    /// that group id, another test's program too. Each test ledger starts at an id of its own.
    static func seedRunIDs(_ state: String) throws {
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let path = state + "/" + Ledger.fileName
        _ = try Ledger(path: path, journal: .disabled)
        let start = UInt32.random(in: 1_000...15_000_000)
        let seeded = try TestProcess.run("/usr/bin/sqlite3", [path,
            "INSERT INTO sqlite_sequence(name, seq) SELECT 'runs', \(start) "
                + "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs')"])
        try #require(seeded.status == 0, "seeding run ids: \(seeded.stderr)")
    }

    /// Starts the daemon and waits until it answers `hello`. Location is probed at a
    /// closed loopback port so it is `unavailable` at once, and no gpsd endpoint listens. `leadsSession`: in a session of
    /// its own without a controlling terminal, as systemd starts services (setsid, then exec,
    /// so the pid stays the daemon's).
    init(arguments: [String] = [], environment: [String: String] = [:], socket: String? = nil,
         waitForReady: Bool = true, leadsSession: Bool = false) throws {
        directory = try TemporaryDirectory()
        socketPath = socket ?? directory.path + "/broker.sock"
        stateDirectory = directory.path + "/state"
        logPath = directory.path + "/daemon.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["--socket", socketPath, "--state-dir", stateDirectory, "--log-target", "stderr",
                             "--gpsd", "127.0.0.1:9", "--gpsd-timeout", "200",
                             // Daemons of parallel tests cannot all have port 947: a test of the
                             // endpoint gives a port of its own.
                             "--location-port", "0"] + arguments
        if leadsSession {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            // Process makes its child a group leader, which may not setsid: back into the
            // parent's group first.
            process.arguments = ["-c", "import os, sys; os.setpgid(0, os.getpgid(os.getppid())); os.setsid(); "
                + "os.execv(sys.argv[1], sys.argv[1:])", Self.binary]
                + (process.arguments ?? [])
        }
        if !arguments.contains("--state-dir") { try Self.seedRunIDs(stateDirectory) }
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "NOTIFY_SOCKET")
        env.removeValue(forKey: "JOURNAL_STREAM")
        env.merge(environment) { _, new in new }
        process.environment = env
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        if waitForReady { try waitUntilServing() }
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var pid: Int32 { process.processIdentifier }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func waitUntilServing(timeout: Double = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard process.isRunning else { throw SetupError("devaccessd exited early: \(log)") }
            if (try? BrokerClient(socketPath: socketPath, timeout: .seconds(1)).hello()) != nil { return }
            usleep(20_000)
        }
        throw SetupError("devaccessd did not answer within \(timeout) s: \(log)")
    }

    /// Sends `signal` and waits for the exit status (nil if it did not exit in time).
    func stop(_ signal: Int32 = SIGTERM, timeout: Double = 10) -> Int32? {
        kill(process.processIdentifier, signal)
        return waitForExit(timeout: timeout)
    }

    func waitForExit(timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        guard !process.isRunning else { return nil }
        return process.terminationStatus
    }

    func client(timeout: Duration = .seconds(10)) throws -> BrokerClient {
        try BrokerClient(socketPath: socketPath, timeout: timeout)
    }
}

/// Running things as a test user, with the groups a login would give (setpriv).
extension TestUser {
    func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> ProcessOutput {
        try TestProcess.run("/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--", executable]
                            + arguments, environment: environment)
    }

    func python(_ script: String, _ arguments: [String] = []) throws -> ProcessOutput {
        try run("/usr/bin/python3", ["-c", script] + arguments)
    }

    /// Starts `script` (python3) as this user in the background and waits for the one JSON
    /// line it prints when it has done its part (it may then go on holding connections).
    func background(_ script: String, _ arguments: [String], reportWithin timeout: Double = 30) throws
        -> BackgroundClient
    {
        try BackgroundClient(user: self, script: script, arguments: arguments, timeout: timeout)
    }

    func devaccess(_ arguments: [String], environment: [String: String]? = nil) throws -> ProcessOutput {
        try run(TestProcess.devaccessBinary, arguments, environment: environment)
    }
}

/// A python3 client running as a test user, killed (SIGKILL: a test process may have
/// SIGTERM ignored, and its children inherit that) by `stop()` or when it goes away.
final class BackgroundClient {
    let process = Process()
    /// What it printed when it reported.
    private(set) var report: [String: Any] = [:]
    private let scratch: TemporaryDirectory
    private let output: String
    private var reports = 1
    private var stopped = false

    init(user: TestUser, script: String, arguments: [String], timeout: Double) throws {
        scratch = try TemporaryDirectory()
        let output = scratch.path + "/report.json"
        self.output = output
        guard FileManager.default.createFile(atPath: output, contents: nil) else {
            throw SetupError("cannot create \(output)")
        }
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--", "/usr/bin/python3",
                             "-c", script] + arguments
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: output, encoding: .utf8), text.hasSuffix("\n") {
                report = try json(text)
                return
            }
            usleep(20_000)
        }
        stop()
        throw SetupError("the background client of \(user.name) did not report in \(timeout) s")
    }

    /// The next JSON line it prints after those seen, or nil when `timeout` seconds pass first.
    func nextReport(timeout: Double) throws -> [String: Any]? {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if let text = try? String(contentsOfFile: output, encoding: .utf8), text.hasSuffix("\n") {
                let lines = text.split(separator: "\n")
                if lines.count > reports {
                    reports += 1
                    return try json(String(lines[reports - 1]))
                }
            }
            usleep(20_000)
        } while Date() < deadline
        return nil
    }

    func stop() {
        guard !stopped else { return }
        stopped = true
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// Small python3 clients, run as test users. Each prints one JSON document.
enum PythonClient {
    /// Sends argv[2] (one line) on one connection and prints the reply and whether the
    /// broker then closed the connection.
    static let oneMessage = """
        import socket, sys, json
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.sendall(sys.argv[2].encode() + b"\\n")
        s.settimeout(10)
        buf = b""
        while not buf.endswith(b"\\n"):
            d = s.recv(65536)
            if not d: break
            buf += d
        s.settimeout(0.5)
        try:
            closed = s.recv(1) == b""
        except (socket.timeout, BlockingIOError):
            closed = False
        except ConnectionResetError:
            closed = True
        print(json.dumps({"reply": json.loads(buf), "closed": closed}))
        """

    /// Opens argv[2] connections at once, then sends a status request on each, then
    /// reads every reply; prints how many were answered for this process's uid.
    static let manyClients = """
        import socket, sys, json, os
        path, n = sys.argv[1], int(sys.argv[2])
        socks = []
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socks.append(s)
        for i, s in enumerate(socks):
            s.sendall(json.dumps({"version": 1, "id": i + 1, "type": "status", "permissions": ["camera"]}).encode() + b"\\n")
        good, bad = 0, []
        for i, s in enumerate(socks):
            s.settimeout(60)
            buf = b""
            while not buf.endswith(b"\\n"):
                d = s.recv(65536)
                if not d: break
                buf += d
            try:
                r = json.loads(buf)
                if r["id"] == i + 1 and r["type"] == "status" and r["uid"] == os.getuid() \\
                        and [p["permission"] for p in r["permissions"]] == ["camera"]:
                    good += 1
                else:
                    bad.append(r)
            except Exception as e:
                bad.append(repr(buf[:200]) + " " + repr(e))
        print(json.dumps({"good": good, "bad": bad[:3]}))
        """
}

/// Declared devices for the daemon (DEBUG builds read DEVACCESS_TEST_DEVICES).
func declareDevices(_ devices: [[String: Any]], in directory: TemporaryDirectory) throws -> String {
    let path = directory.path + "/devices.json"
    let data = try JSONSerialization.data(withJSONObject: ["devices": devices])
    try data.write(to: URL(fileURLWithPath: path))
    return path
}

func json(_ text: String) throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
        throw SetupError("not a JSON object: \(text)")
    }
    return object
}
