import Foundation
import Glibc
import Synchronization
import Testing
import DevAccessCore
@testable import DevAccessBroker
import DevAccessEngine
import DevAccessHardware
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// The server and its parts in-process, with a stub handler: no root needed.
/// Handlers run on the server's own threads, so tests blocking the shared concurrency
/// pool around them (synchronous tests in parallel) cannot stall the server.
@Suite(.serialized)
struct InProcessServerTests {
    /// When a `status` started, and when the test lets it finish (or `holdAtMost` passed).
    final class Gate: Sendable {
        let holdAtMost: Duration
        let started = DispatchSemaphore(value: 0)
        let released = Atomic<Bool>(false)
        let answered = Atomic<Bool>(false)
        init(holdAtMost: Duration) { self.holdAtMost = holdAtMost }
        func release() { released.store(true, ordering: .releasing) }
    }

    /// `status` is held at its gate; `hello` answers at once.
    struct SlowStatusHandler: RequestHandler {
        let gate: Gate
        func handle(_ request: RequestEnvelope, from peer: Peer) async -> Reply {
            if case .status = request.request {
                gate.started.signal()
                let limit = ContinuousClock.now + gate.holdAtMost
                while !gate.released.load(ordering: .acquiring) && ContinuousClock.now < limit {
                    try? await Task.sleep(for: .milliseconds(10))
                }
                gate.answered.store(true, ordering: .releasing)
                return .status(StatusReply(user: "stub", uid: peer.uid, permissions: []))
            }
            return .hello(HelloReply(server: "stub", peer: PeerInfo(uid: peer.uid, gid: peer.gid, pid: peer.pid,
                                                                    groups: peer.groups, user: nil,
                                                                    program: peer.program, admin: false)))
        }
    }

    final class Served: Sendable {
        let server: BrokerServer
        let gate: Gate
        let finished = DispatchSemaphore(value: 0)

        init(_ path: String, holdAtMost: Duration = .seconds(1), limits: BrokerServer.Limits = BrokerServer.Limits()) throws {
            gate = Gate(holdAtMost: holdAtMost)
            server = try BrokerServer(socketPath: path, handler: SlowStatusHandler(gate: gate), log: BrokerLog(target: .none),
                                      limits: limits)
            let thread = Thread { [server, finished] in
                server.run()
                finished.signal()
            }
            thread.start()
        }
    }

    /// Judged by order, not time: twenty hellos are answered while a status is still held.
    @Test func aSlowRequestDoesNotHoldUpOtherClients() throws {
        let directory = try TemporaryDirectory()
        let served = try Served(directory.path + "/s.sock", holdAtMost: .seconds(120))
        let slow = try BrokerClient(socketPath: served.server.socketPath)
        try slow.writeRaw(MessageCodec.encode(RequestEnvelope(id: 1, request: .status(StatusQuery()))) + [0x0a])
        #expect(served.gate.started.wait(timeout: .now() + 30) == .success, "the status never reached the handler")
        for _ in 0..<20 { _ = try BrokerClient(socketPath: served.server.socketPath).hello() }
        let statusAnswered = served.gate.answered.load(ordering: .acquiring)
        #expect(!statusAnswered, "hellos answered only after the held status")
        served.gate.release()
        #expect(try slow.readReply().reply.type == "status")
        served.server.stop()
        #expect(served.finished.wait(timeout: .now() + 5) == .success)
        #expect(!FileManager.default.fileExists(atPath: served.server.socketPath))
    }

    @Test func stopWaitsForRequestsInFlight() throws {
        let directory = try TemporaryDirectory()
        let served = try Served(directory.path + "/s.sock")
        let client = try BrokerClient(socketPath: served.server.socketPath)
        try client.writeRaw(MessageCodec.encode(RequestEnvelope(id: 3, request: .status(StatusQuery()))) + [0x0a])
        // In flight for certain (a fixed sleep here once lost the race on a loaded machine).
        #expect(served.gate.started.wait(timeout: .now() + 30) == .success, "the status never reached the handler")
        served.server.stop()
        #expect(try client.readReply().id == 3, "answered within the shutdown grace")
        #expect(served.finished.wait(timeout: .now() + 5) == .success)
    }

    @Test func peerIdentityOfThisProcess() throws {
        var pair: [CInt] = [0, 0]
        #expect(socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        let peer = try Peer.identify(socket: pair[0]).get()
        #expect(peer.uid == getuid())
        #expect(peer.gid == getgid())
        #expect(peer.pid == getpid())
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(peer.program == exe)
        #expect(peer.pidfdSource != nil)
    }

    @Test func anExitedPeerHasNoProgram() throws {
        // The child connects, then exits; the broker identifies it afterwards.
        let directory = try TemporaryDirectory()
        let path = directory.path + "/s.sock"
        let listener = try Listener(path: path)
        defer { listener.close() }
        let child = try TestProcess.run("/usr/bin/python3", ["-c",
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); import os; os._exit(0)", path])
        #expect(child.status == 0)
        var fd: CInt = -1
        for _ in 0..<100 where fd < 0 {
            fd = accept(listener.descriptor, nil, nil)
            if fd < 0 { usleep(10_000) }
        }
        defer { close(fd) }
        let peer = try Peer.identify(socket: fd).get()
        #expect(peer.program == nil)
        #expect(peer.programProblem != nil, "says why: \(peer.programProblem ?? "")")
    }

    @Test func logfmtQuotesWhatNeedsQuoting() {
        #expect(BrokerLog.quote("plain") == "plain")
        #expect(BrokerLog.quote("two words") == "\"two words\"")
        #expect(BrokerLog.quote("") == "\"\"")
        #expect(BrokerLog.quote("a=b") == "\"a=b\"")
        #expect(BrokerLog.quote("say \"hi\"\n\\") == #""say \"hi\"\n\\""#)
        #expect(BrokerLog.quote("\u{1}") == "\"\\u0001\"")
        #expect(BrokerLog.logfmt(.warning, "too many", ["limit": "2", "path": "/run/x y"])
                == "level=warning msg=\"too many\" limit=2 path=\"/run/x y\"\n")
        #expect(BrokerLog.journalFields(.info, "listening", ["state_dir": "/x"])
                == ["MESSAGE=listening", "PRIORITY=6", "SYSLOG_IDENTIFIER=devaccessd", "DEVACCESS_STATE_DIR=/x"])
    }

    /// What devaccessd's main read is the one source of the settings the environment gives:
    /// the value passed in, not this process's variables.
    @Test func daemonOptionsTakeTheirEnvironmentFromThePassedValue() throws {
        let environment: ProcessEnvironment = [
            "DEVACCESS_STATE_DIR": "/state", "DEVACCESS_CONFIG_DIR": "/config", "DEVACCESS_GPSD": "[::1]:3000",
            "DEVACCESS_PROMPT_TIMEOUT": "7", "DEVACCESSD_STATUS_CACHE": "off", "JOURNAL_STREAM": "8:1234",
            "DEVACCESS_TEST_DEVICES": "/tmp/devices.json", "DEVACCESS_TEST_CRASH_AT": "after-acl-edit",
            "DEVACCESS_TEST_INOTIFY_FAIL": "ENOSPC", "DEVACCESS_TEST_AUDIT_WINDOW": "5",
            "DEVACCESS_TEST_PAM_SERVICE": "devaccess-test",
        ]
        let (options, _) = try DaemonOptions.parse(["--max-prompts-per-user", "2"], environment: environment)
        #expect(options.stateDirectory == "/state")
        #expect(options.configDirectory == "/config")
        #expect(options.probe.gpsd == GpsdEndpoint(host: "::1", port: 3000))
        #expect(options.journalStream == "8:1234")
        #expect(options.maxPromptsPerUser == 2)
        let settings = options.requestSettings
        #expect(settings.promptTimeout == .seconds(7))
        #expect(!settings.keepsStatusInputs)
        #if DEBUG
        #expect(options.testDevices == "/tmp/devices.json")
        #expect(settings.testCrashAt == "after-acl-edit")
        #expect(settings.testFailWatches == ENOSPC)
        #expect(settings.auditWindow == .seconds(5))
        #expect(settings.pamService == "devaccess-test")
        #endif
        // Nothing set: the built-in defaults, whatever this test process's own variables say.
        let (plain, _) = try DaemonOptions.parse([], environment: [:])
        #expect(plain.journalStream == nil && plain.testDevices == nil)
        #expect(plain.requestSettings.promptTimeout == RequestSettings().promptTimeout)
        #expect(plain.requestSettings.keepsStatusInputs)
        #expect(plain.requestSettings.testFailWatches == nil && plain.requestSettings.testCrashAt == nil)
        #expect(BrokerLog.detectTarget(journalStream: nil) == .stderr)
        #expect {
            try DaemonOptions.parse([], environment: ["DEVACCESS_GPSD": "gps:none"])
        } throws: { error in
            error is DaemonOptions.UsageError && "\(error)".contains("DEVACCESS_GPSD")
        }
        // Blanks mean the default, as devaccess reads the same variable (it once refused them).
        for blank in ["", "  ", "\t"] {
            let (options, _) = try DaemonOptions.parse([], environment: ["DEVACCESS_GPSD": blank])
            #expect(options.probe.gpsd == GpsdEndpoint.default, "DEVACCESS_GPSD=\(blank.debugDescription)")
        }
    }

    @Test func daemonOptions() throws {
        let (defaults, action) = try DaemonOptions.parse([], environment: [:])
        #expect(action == .serve)
        #expect(defaults.socketPath == "/run/devaccess/broker.sock")
        #expect(defaults.stateDirectory == "/var/lib/devaccess")
        #expect(defaults.adminGroup == "devaccess-admin")
        #expect(defaults.configDirectory == "/etc/devaccess")
        let (options, _) = try DaemonOptions.parse(
            ["--socket=/tmp/x.sock", "--state-dir", "/tmp/s", "--max-connections", "5", "--log-level", "debug"],
            environment: ["DEVACCESS_STATE_DIR": "/ignored"])
        #expect(options.socketPath == "/tmp/x.sock")
        #expect(options.stateDirectory == "/tmp/s")
        #expect(options.limits.maxConnections == 5)
        #expect(options.logLevel == .debug)
        #expect(try DaemonOptions.parse([], environment: ["DEVACCESS_STATE_DIR": "/env"]).0.stateDirectory == "/env")
        #expect(throws: DaemonOptions.UsageError.self) { try DaemonOptions.parse(["--log-level", "loud"], environment: [:]) }
        #expect(throws: DaemonOptions.UsageError.self) { try DaemonOptions.parse(["--socket"], environment: [:]) }
        #expect(throws: DaemonOptions.UsageError.self) { try DaemonOptions.parse(["extra"], environment: [:]) }
        #expect(try DaemonOptions.parse(["--help", "--bogus"], environment: [:]).1 == .help)
    }

    @Test func onlyAdminsActForOthers() {
        let group = "group-that-does-not-exist-\(getpid())"
        let user = Caller.identified(Peer(pid: 10, uid: 1000, gid: 1000, groups: []).credentials, adminGroup: group,
                                     runs: { _ in nil })
        let root = Caller.identified(Peer(pid: 11, uid: 0, gid: 0, groups: []).credentials, adminGroup: group,
                                     runs: { _ in nil })
        #expect(user.standing == .user)
        #expect(root.standing == .root)
        let forSelf: [(String, Authorization.Action, Authorization.Target)] = [
            ("status", .status, .itself), ("request", .request([.camera], accuracy: nil), .itself),
        ]
        let forOthers: [(String, Authorization.Action, Authorization.Target)] = [
            ("status for another user", .status, .anotherUser), ("pending, approve, reject", .administer, .itself),
        ]
        for (name, action, target) in forSelf + forOthers {
            #expect(root.may(action, target: target), "root may \(name)")
        }
        for (name, action, target) in forSelf {
            #expect(user.may(action, target: target), "a user may \(name)")
        }
        for (name, action, target) in forOthers {
            #expect(!user.may(action, target: target), "a user may not \(name)")
        }
    }

    @Test func freshProbeStartsAfterTheRequestArrives() async {
        // Every report carries the probe's sequence number; a request made after probe N
        // finished must get a later one.
        let counter = Mutex(0)
        let probe = FreshProbe(permissions: [.camera]) { permission in
            let number = counter.withLock { value -> Int in
                value += 1
                return value
            }
            usleep(20_000)
            return AdapterReport(permission: permission, devices: [], unavailableReason: "probe \(number)")
        }
        let first = await probe.report(.camera)
        let second = await probe.report(.camera)
        #expect(first.unavailableReason == "probe 1")
        #expect(second.unavailableReason == "probe 2")
        // Fifty at once share far fewer probes than fifty.
        let reports = await withTaskGroup(of: AdapterReport.self) { group in
            for _ in 0..<50 { group.addTask { await probe.report(.camera) } }
            var all: [AdapterReport] = []
            for await report in group { all.append(report) }
            return all
        }
        let distinct = Set(reports.compactMap(\.unavailableReason))
        #expect(reports.count == 50)
        #expect(distinct.count < 50)
        #expect(!distinct.contains("probe 2"), "no request joins a probe that started before it")
    }
}
