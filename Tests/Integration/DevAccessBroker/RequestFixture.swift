import Foundation
import Glibc
import Synchronization
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// A real devaccessd with a policy of the test's own, a camera and a microphone node
/// (mknod 1:3, root 0600: nobody but root opens them until an ACL entry says so), an
/// admin group of its own (`--admin-group`), and a PAM service file of its own.
final class RequestSetup: @unchecked Sendable {
    /// Setups of one test process made so far: each gets a PAM service file of its own, as
    /// parallel tests of one process made the same name, raced on copying it ("File exists")
    /// and removed it under each other.
    private static let made = Atomic<Int>(0)

    let nodes: TemporaryDirectory
    let config: TemporaryDirectory
    private(set) var daemon: RunningDaemon
    /// The ledger's directory: the first daemon's, kept by the ones after a restart.
    let stateDirectory: String
    private let arguments: [String]
    private let environment: [String: String]
    let camera: String
    let microphone: String
    let admins: TestGroup?
    let pamService: String
    /// The declared devices file (DEVACCESS_TEST_DEVICES), for CLI runs on the same nodes.
    let devices: String
    /// With `location`: gpsd gated to devaccessd (config/nftables/devaccess-gpsd.nft) and a
    /// receiver node only root may read, so nothing goes around the gate: the status comes
    /// from the decisions and the level.
    let receiver: String?

    /// `daemonArguments`: more devaccessd options (limits).
    /// `daemonLeadsSession`: devaccessd in a session of its own, as under systemd.
    /// `firstDaemonEnvironment`: more variables for the first daemon only (a crash point:
    /// the daemons started after it run without them).
    init(policy: String, admins: [TestUser] = [], promptTimeout: Int = 30, daemonArguments: [String] = [],
         daemonLeadsSession: Bool = false, firstDaemonEnvironment: [String: String] = [:], location: Bool = false) throws {
        nodes = try TemporaryDirectory()
        config = try TemporaryDirectory()
        camera = try nodes.makeNullNode("video0", mode: "0600")
        microphone = try nodes.makeNullNode("pcmC0D0c", mode: "0600")
        receiver = location ? try nodes.makeNullNode("ttyACM0", mode: "0600") : nil
        try Data(policy.utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        var declared: [[String: Any]] = [
            ["permission": "camera", "id": "camera:test-video-index0", "name": "Test Camera",
             "nodes": [["path": camera, "major": 1, "minor": 3]]],
            ["permission": "microphone", "id": "microphone:test-card0", "name": "Test Microphone",
             "nodes": [["path": microphone, "major": 1, "minor": 3]]],
        ]
        if let receiver {
            declared.append(["permission": "location", "id": "location:gpsd:\(receiver)", "name": "Test GPS",
                             "nodes": [["path": receiver, "role": "receiver", "required": "read", "major": 1,
                                        "minor": 3]],
                             "service": ["name": "gpsd", "endpoint": "127.0.0.1:2947", "openToAllLocalUsers": false]])
        }
        let devices = try declareDevices(declared, in: nodes)
        self.devices = devices
        self.admins = admins.isEmpty ? nil : try TestGroup("adm", members: admins)
        pamService = "devaccess-test-req\(getpid() % 100_000)-\(Self.made.add(1, ordering: .relaxed).newValue)"
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../config/pam.d/devaccess").standardized.path
        try TestProcess.setup("cp", [shipped, "/etc/pam.d/\(pamService)"])
        var arguments = ["--config-dir", config.path]
        if let group = self.admins { arguments += ["--admin-group", group.name] }
        arguments += daemonArguments
        environment = [
            "DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_PROMPT_TIMEOUT": String(promptTimeout),
            "DEVACCESS_TEST_PAM_SERVICE": pamService,
        ]
        self.arguments = arguments
        daemon = try RunningDaemon(arguments: arguments, environment: environment.merging(firstDaemonEnvironment) { $1 },
                                   leadsSession: daemonLeadsSession)
        stateDirectory = daemon.stateDirectory
    }

    /// Stops the daemon (SIGTERM) and starts another on the same ledger, socket and policy.
    func restart() throws {
        let state = stateDirectory
        let socket = daemon.socketPath
        guard daemon.stop() == 0 else { throw SetupError("devaccessd did not stop cleanly: \(daemon.log)") }
        // The old daemon's directory (its ledger) lives as long as `previous` does.
        previous.append(daemon)
        daemon = try RunningDaemon(arguments: arguments + ["--state-dir", state], environment: environment, socket: socket)
    }

    private var previous: [RunningDaemon] = []

    /// Stops the daemon (SIGTERM) and keeps its ledger for `start()`.
    func stop() throws {
        guard daemon.stop() == 0 else { throw SetupError("devaccessd did not stop cleanly: \(daemon.log)") }
    }

    /// Starts a daemon again on the same ledger, socket and policy after `stop()`.
    func start() throws {
        previous.append(daemon)
        daemon = try RunningDaemon(arguments: arguments + ["--state-dir", stateDirectory], environment: environment,
                                   socket: daemon.socketPath)
    }

    deinit { TestProcess.cleanup("rm", ["-f", "/etc/pam.d/\(pamService)"]) }

    var socket: [String] { ["--socket", daemon.socketPath] }

    func ledger() throws -> Ledger {
        try Ledger(path: stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
    }

    /// Every decision of `user`, standing or not.
    func grants(_ user: TestUser) throws -> [Grant] {
        try ledger().grants(uid: user.uid, includeInactive: true)
    }

    func requestEvents(_ user: TestUser) throws -> [AuditEvent] {
        try ledger().events().map(\.event).filter { $0.type == .request && $0.subject?.uid == user.uid }
    }
}

/// What `devaccess` printed on its terminal and how it ended.
struct TerminalRun {
    var output: String
    /// How many scripted answers were typed.
    var answered: Int
    var exit: Int32?
    var signal: Int32?

    var prompts: Int { output.components(separatedBy: "within ").count - 1 }
}

extension TestUser {
    /// Runs `devaccess ARGUMENTS` as this user on a pseudo-terminal that is its controlling
    /// terminal (python's pty.fork: setsid + TIOCSCTTY), typing each answer once its
    /// expected text has appeared: the way a person at a terminal answers.
    func onTerminal(_ arguments: [String], answers: [(expect: String, type: String)] = []) throws -> TerminalRun {
        let script = try JSONSerialization.data(withJSONObject: answers.map { [$0.expect, $0.type] })
        let result = try TestProcess.run("/usr/bin/python3", ["-c", PtyDriver.script, String(decoding: script, as: UTF8.self),
                                                             "/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(gid)",
                                                             "--init-groups", "--", TestProcess.devaccessBinary] + arguments)
        guard result.status == 0, let document = try? json(result.stdout) else {
            throw SetupError("pty driver failed (\(result.status)): \(result.stderr)")
        }
        return TerminalRun(output: document["out"] as? String ?? "", answered: document["answered"] as? Int ?? 0,
                           exit: (document["exit"] as? Int).map(Int32.init), signal: (document["signal"] as? Int).map(Int32.init))
    }

    /// Runs `devaccess ARGUMENTS` as this user in a new session without a controlling terminal.
    func withoutTerminal(_ arguments: [String]) throws -> ProcessOutput {
        try TestProcess.run("/usr/bin/setsid", ["-w", "/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(gid)",
                                               "--init-groups", "--", TestProcess.devaccessBinary] + arguments)
    }
}

enum PtyDriver {
    static let script = """
        import os, pty, sys, time, select, json, signal
        answers = json.loads(sys.argv[1]); cmd = sys.argv[2:]
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execv(cmd[0], cmd)
            finally:
                os._exit(127)
        out = b""; step = 0; mark = 0; deadline = time.time() + 90
        while True:
            if step < len(answers):
                pos = out.find(answers[step][0].encode(), mark)
                if pos >= 0:
                    mark = pos + len(answers[step][0])
                    time.sleep(0.05)
                    os.write(fd, answers[step][1].encode())
                    step += 1
                    continue
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                out += data
            if time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"out": out.decode("utf-8", "replace"), "answered": step,
                          "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                          "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}))
        """
}
