import Foundation
import Glibc
import Testing
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// The real devaccessd, started from the build directory. One suite, run serially:
/// every test starts daemons and test users, and the admin test changes a system group.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct DaemonTests {}

extension DaemonTests {
    @Test func readinessAndStoppingAreNotifiedToSystemd() throws {
        let directory = try TemporaryDirectory()
        let notifyPath = directory.path + "/notify"
        let receiver = try DatagramReceiver(path: notifyPath)
        let daemon = try RunningDaemon(environment: ["NOTIFY_SOCKET": notifyPath], waitForReady: false)
        let ready = try #require(receiver.receive(timeout: 10), "no sd_notify message: \(daemon.log)")
        #expect(ready.split(separator: "\n").contains("READY=1"), "\(ready)")
        #expect(ready.contains("MAINPID=\(daemon.pid)"))
        #expect(ready.contains("STATUS=listening on \(daemon.socketPath)"))
        // Ready means ready: the socket answers now.
        #expect(try daemon.client().hello().server.hasPrefix("devaccessd "))
        #expect(daemon.stop() == 0)
        let stopping = try #require(receiver.receive(timeout: 5))
        #expect(stopping.split(separator: "\n").contains("STOPPING=1"))
    }

    @Test func sigtermStopsCleanlyAndRemovesTheSocket() throws {
        let daemon = try RunningDaemon()
        let idle = try daemon.client()
        _ = try idle.hello()
        #expect(FileManager.default.fileExists(atPath: daemon.socketPath))
        #expect(daemon.stop(SIGTERM) == 0, "\(daemon.log)")
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
        #expect(daemon.log.contains("msg=\"shutting down\" reason=\"SIGTERM from pid"))
        #expect(daemon.log.contains("level=info msg=stopped"))
        // The idle connection was closed, not left hanging.
        #expect(throws: BrokerClientError.self) { try idle.hello() }
    }

    @Test func sigintStopsCleanlyToo() throws {
        let daemon = try RunningDaemon()
        #expect(daemon.stop(SIGINT) == 0)
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
    }

    @Test func requestsInFlightAreAnsweredDuringShutdown() throws {
        // A gpsd that accepts and never speaks: a location status takes the full timeout.
        let silent = try SilentTCPListener()
        let daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(silent.port)", "--gpsd-timeout", "800"])
        let client = try daemon.client()
        let started = Date()
        var line = MessageCodec.encode(RequestEnvelope(id: 5, request: .status(StatusQuery(permissions: [.location]))))
        line.append(0x0a)
        try client.writeRaw(line)
        usleep(200_000)
        kill(daemon.pid, SIGTERM)
        let reply = try client.readReply()
        #expect(reply.id == 5)
        guard case .status(let status) = reply.reply else {
            Issue.record("expected a status reply, got \(reply)")
            return
        }
        #expect(status.permissions.first?.status == .unavailable)
        #expect(Date().timeIntervalSince(started) >= 0.7, "the probe really waited for gpsd")
        #expect(daemon.waitForExit(timeout: 10) == 0)
    }

    @Test func logsAreLogfmtLinesOnStderr() throws {
        let daemon = try RunningDaemon()
        _ = daemon.stop()
        let first = daemon.log.split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.hasPrefix("level=info msg=listening socket=\(daemon.socketPath) state_dir=\(daemon.stateDirectory)"),
                "\(first)")
    }

    @Test func journalTargetWritesNothingToStderr() throws {
        // No journald on a test machine: sd_journal_sendv drops the entries, and the
        // daemon must neither fail nor fall back to writing them to stderr.
        let daemon = try RunningDaemon(arguments: ["--log-target", "journal"])
        #expect(try daemon.client().hello().server.hasPrefix("devaccessd"))
        #expect(daemon.stop() == 0)
        #expect(daemon.log.isEmpty, "\(daemon.log)")
    }

    @Test func aLiveBrokerIsNotReplacedAStaleSocketIs() throws {
        let first = try RunningDaemon()
        let second = Process()
        second.executableURL = URL(fileURLWithPath: RunningDaemon.binary)
        second.arguments = ["--socket", first.socketPath, "--state-dir", first.stateDirectory + "2", "--log-target", "stderr"]
        let errors = Pipe()
        second.standardError = errors
        try second.run()
        second.waitUntilExit()
        #expect(second.terminationStatus == 1)
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("another broker accepts connections there"), "\(message)")
        #expect(try first.client().hello().server.hasPrefix("devaccessd"), "the first broker still serves")

        // kill -9 leaves the socket file behind; the next broker replaces it.
        _ = first.stop(SIGKILL)
        #expect(FileManager.default.fileExists(atPath: first.socketPath))
        let third = try RunningDaemon(socket: first.socketPath)
        #expect(try BrokerClient(socketPath: first.socketPath).hello().server.hasPrefix("devaccessd"))
        #expect(third.stop() == 0)
    }

    /// `sudo devaccessd &` twice: the second names the first and exits at once (it waited
    /// 10 s for the engine lock, as for an offline command, then said only "cannot take").
    @Test func aSecondDaemonOnTheSameStateRefusesAtOnceNamingTheFirst() throws {
        let first = try RunningDaemon()
        let second = Process()
        second.executableURL = URL(fileURLWithPath: RunningDaemon.binary)
        second.arguments = ["--socket", first.socketPath, "--state-dir", first.stateDirectory, "--log-target", "stderr"]
        let errors = Pipe()
        second.standardError = errors
        let started = Date()
        try second.run()
        second.waitUntilExit()
        let seconds = Date().timeIntervalSince(started)
        #expect(second.terminationStatus == 1)
        #expect(seconds < 2, "took \(seconds) s")
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("devaccessd is already running (pid \(first.pid))"), "\(message)")
        #expect(try first.client().hello().server.hasPrefix("devaccessd"), "the first broker still serves")
        #expect(first.stop() == 0)
    }

    @Test func somethingElseAtTheSocketPathIsLeftAlone() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/broker.sock"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: path))
        let daemon = try RunningDaemon(socket: path, waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 1)
        #expect(daemon.log.contains("something that is not a socket is there; not removing it"), "\(daemon.log)")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "precious")
    }

    @Test func aSocketDirectoryAnotherUserControlsIsRefused() throws {
        let directory = try TemporaryDirectory()
        let owned = directory.path + "/theirs"
        try TestProcess.setup("mkdir", ["-m", "0755", owned])
        try TestProcess.setup("chown", ["nobody", owned])
        let daemon = try RunningDaemon(socket: owned + "/broker.sock", waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 1)
        #expect(daemon.log.contains("who could replace the socket"), "\(daemon.log)")
    }

    /// Issue 27 item 7: without its enforcement worker devaccessd would serve with no
    /// expiry, hotplug or periodic enforcement (granted ACL entries never expire): it
    /// refuses to start and says why. The worker's eventfd fails through a DEBUG-only hook.
    @Test func anEnforcerThatCannotBeMadeStopsTheStart() throws {
        let daemon = try RunningDaemon(environment: ["DEVACCESS_TEST_ENFORCER_FAIL": "EMFILE"], waitForReady: false)
        #expect(daemon.waitForExit(timeout: 10) == 1, "\(daemon.log)")
        #expect(daemon.log.contains("refusing to start: the enforcement worker cannot be created"), "\(daemon.log)")
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath), "it never served")
    }

    @Test func badCommandLinesExit64() throws {
        let result = try TestProcess.run(RunningDaemon.binary, ["--sokcet", "/x"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("unknown option '--sokcet'"))
        #expect(try TestProcess.run(RunningDaemon.binary, ["--idle-timeout", "0"]).status == 64)
        #expect(try TestProcess.run(RunningDaemon.binary, ["--socket", "relative.sock"]).status == 64)
        let help = try TestProcess.run(RunningDaemon.binary, ["--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: devaccessd [OPTIONS]"))
    }

    @Test func theConnectionLimitAnswersBusy() throws {
        let daemon = try RunningDaemon(arguments: ["--max-connections", "2"])
        usleep(200_000)  // the fixture's readiness check has disconnected by now
        let first = try daemon.client()
        let second = try daemon.client()
        _ = try first.hello()
        _ = try second.hello()
        let third = try daemon.client()
        let reply = try third.readReply()
        #expect(reply == ReplyEnvelope(id: 0, reply: .error(ProtocolError(.busy, context: "connection",
            reason: "the broker serves 2 connections already; try again later"))))
        #expect(throws: BrokerClientError.closed(path: daemon.socketPath)) { try third.readReply() }
        _ = try first.hello()
    }

    @Test func halfSentMessagesTimeOutAndIdleConnectionsClose() throws {
        let daemon = try RunningDaemon(arguments: ["--idle-timeout", "1"])
        let partial = try daemon.client()
        let idle = try daemon.client()
        try partial.writeRaw(Array(#"{"version":1,"#.utf8))
        let reply = try partial.readReply()
        guard case .error(let error) = reply.reply else {
            Issue.record("expected an error, got \(reply)")
            return
        }
        #expect(error.code == .timeout)
        #expect(throws: BrokerClientError.closed(path: daemon.socketPath)) { try partial.readReply() }
        #expect(throws: BrokerClientError.closed(path: daemon.socketPath)) { try idle.readReply() }
    }
}

/// A datagram socket standing in for systemd's notification socket.
final class DatagramReceiver {
    let descriptor: CInt

    init(path: String) throws {
        descriptor = socket(AF_UNIX, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else { throw SetupError("bind \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(descriptor) }

    func receive(timeout: Double) -> String? {
        var descriptor = pollfd(fd: self.descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, CInt(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(self.descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }
}

/// A TCP listener on a free loopback port that accepts nothing and says nothing.
final class SilentTCPListener {
    let descriptor: CInt
    let port: UInt16

    init() throws {
        let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(fd, pointer, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        descriptor = fd
        guard bound else { throw SetupError("cannot listen on 127.0.0.1") }
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(descriptor) }
}
