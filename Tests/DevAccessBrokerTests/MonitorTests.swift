import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// `devaccess monitor` tells the truth: the status it prints is the one `status` gives (the
/// ledger's denial, the policy's restriction, from devaccessd for a user who cannot read the
/// ledger), it prints the current state before any event, and each event of a batch gets its
/// own before and after. A real devaccessd with two declared cameras whose nodes anyone may
/// open (so the nodes alone would say authorized), real users, uevents declared to the debug
/// build (DEVACCESS_TEST_UEVENTS: a test host has no udevd).
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes and users"))
struct MonitorTests {
    final class Setup {
        let nodes: TemporaryDirectory
        let config: TemporaryDirectory
        let daemon: RunningDaemon
        let cameras: [String]
        /// The file the running monitor reads its uevents from (a new one per monitor).
        private(set) var uevents: String
        let devices: String

        init(policy: String) throws {
            let nodes = try TemporaryDirectory()
            let cameras = try ["video0", "video1"].map { try nodes.makeNullNode($0, mode: "0666") }
            let devices = try declareDevices(cameras.enumerated().map { index, path in
                ["permission": "camera", "id": "camera:test-video-index\(index)", "name": "Test Camera \(index)",
                 "nodes": [["path": path, "major": 1, "minor": 3]]]
            }, in: nodes)
            (self.nodes, self.cameras, self.devices) = (nodes, cameras, devices)
            config = try TemporaryDirectory()
            uevents = nodes.path + "/uevents.jsonl"
            try Data(policy.utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
            daemon = try RunningDaemon(arguments: ["--config-dir", config.path],
                                       environment: ["DEVACCESS_TEST_DEVICES": devices])
        }

        /// `devaccess monitor --json` as `user`, reading the ledger's directory as `status`
        /// would (private to root: the status comes from devaccessd).
        func monitor(_ user: TestUser) throws -> RunningProbe {
            uevents = nodes.path + "/uevents-\(user.name).jsonl"
            _ = FileManager.default.createFile(atPath: uevents, contents: nil)
            return try RunningProbe(user, socket: daemon.socketPath, ["monitor", "--json"], binary: TestProcess.devaccessBinary,
                             environment: ["DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_TEST_UEVENTS": uevents,
                                           "DEVACCESS_STATE_DIR": daemon.stateDirectory,
                                           "DEVACCESS_SOCKET": daemon.socketPath])
        }

        /// Appends uevents in one write: they are queued together, one batch.
        func send(_ events: [(action: String, devnode: String, seqnum: Int)]) throws {
            let text = events.map {
                #"{"action":"\#($0.action)","devnode":"\#($0.devnode)","subsystem":"video4linux","seqnum":\#($0.seqnum)}"#
            }.joined(separator: "\n") + "\n"
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: uevents))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(text.utf8))
            try handle.close()
        }
    }

    /// The camera and microphone lines (location's come from its own watcher, in any order).
    static func devices(_ lines: [[String: Any]]) -> [[String: Any]] {
        lines.filter { ["camera", "microphone"].contains($0["permission"] as? String ?? "") }
    }

    /// Waits until `count` camera and microphone lines were printed.
    static func waitForDeviceLines(_ monitor: RunningProbe, _ count: Int) throws -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let lines = devices(monitor.lines)
            if lines.count >= count { return lines }
            usleep(10_000)
        }
        throw SetupError("monitor printed \(devices(monitor.lines).count) of \(count) device lines: \(monitor.text)")
    }

    static func brief(_ line: [String: Any]) -> String {
        let event = line["event"] as? String ?? "?"
        let id = (line["device"] as? [String: Any])?["id"] as? String ?? "-"
        if event == "snapshot" { return "snapshot \(line["permission"] as? String ?? "?") \(id) \(line["status"] ?? "?")" }
        return "\(event) \(id) \(line["seqnum"] ?? "?") \(line["previousStatus"] ?? "?")->\(line["status"] ?? "?")"
    }

    /// The attack on the old monitor: a user with a standing denial (erin) and one the policy
    /// forbids the camera (rita), on nodes mode 0666, were told `authorized`. Now: the snapshot
    /// says denied / restricted for every camera and the microphone line says there is none,
    /// before any event; a batch of two removes gives `X->X` then `X->unavailable`, and the
    /// cameras coming back `unavailable->X` then `X->X`; never authorized.
    @Test func aDenialAndARestrictionShowInTheSnapshotAndInEveryEventOfABatch() throws {
        let erin = try TestUser("mondeny")
        let rita = try TestUser("monrule")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n\n[Rule]\nPermission=camera\nUser=\(rita.name)\nAction=deny\n")
        let denied = try TestProcess.devaccess(["deny", "camera", "--user", erin.name, "--socket", setup.daemon.socketPath])
        #expect(denied.status == 0, "\(denied.stdout) \(denied.stderr)")
        let status = try erin.run(TestProcess.devaccessBinary, ["check", "camera"],
                                  environment: ["DEVACCESS_TEST_DEVICES": setup.devices,
                                                "DEVACCESS_STATE_DIR": setup.daemon.stateDirectory,
                                                "DEVACCESS_SOCKET": setup.daemon.socketPath])
        #expect(status.status == 3, "status itself says denied (exit 3): \(status.status) \(status.stderr)")

        for (user, word) in [(erin, "denied"), (rita, "restricted")] {
            let monitor = try setup.monitor(user)
            let snapshot = try Self.waitForDeviceLines(monitor, 3)
            #expect(snapshot.map(Self.brief) == [
                "snapshot camera camera:test-video-index0 \(word)", "snapshot camera camera:test-video-index1 \(word)",
                "snapshot microphone - unavailable",
            ], "\(user.name): \(monitor.text)")
            #expect((snapshot.first?["device"] as? [String: Any])?["usable"] as? Bool == true,
                    "the node opens; the decision says \(word)")

            // rmmod: both remove events are queued before monitor reads the status again.
            // devaccessd's declared devices stay listed: which devices are there must come
            // from the events, not from that reading.
            let base = user.uid * 10
            try setup.send([("remove", setup.cameras[0], Int(base) + 1), ("remove", setup.cameras[1], Int(base) + 2)])
            let removed = try Self.waitForDeviceLines(monitor, 5)
            #expect(removed.dropFirst(3).map(Self.brief) == [
                "remove camera:test-video-index0 \(base + 1) \(word)->\(word)",
                "remove camera:test-video-index1 \(base + 2) \(word)->unavailable",
            ], "\(user.name): \(monitor.text)")

            // modprobe: both come back in one batch.
            try setup.send([("add", setup.cameras[0], Int(base) + 3), ("add", setup.cameras[1], Int(base) + 4)])
            let added = try Self.waitForDeviceLines(monitor, 7)
            #expect(added.dropFirst(5).map(Self.brief) == [
                "add camera:test-video-index0 \(base + 3) unavailable->\(word)",
                "add camera:test-video-index1 \(base + 4) \(word)->\(word)",
            ], "\(user.name): \(monitor.text)")
            #expect(!monitor.text.contains("authorized"), "\(user.name) was told authorized: \(monitor.text)")
            #expect(monitor.process.isRunning)
        }
    }

    /// Root reads the ledger and the policy itself, as `status` does (no devaccessd asked):
    /// `monitor --user erin` as root says denied too, from the ledger file.
    @Test func rootReadsTheLedgerItselfAndSeesTheDenial() throws {
        let erin = try TestUser("monroot")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        let denied = try TestProcess.devaccess(["deny", "camera", "--user", erin.name, "--socket", setup.daemon.socketPath])
        #expect(denied.status == 0, "\(denied.stdout) \(denied.stderr)")
        let scratch = try TemporaryDirectory()
        let output = scratch.path + "/out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let events = scratch.path + "/uevents.jsonl"
        _ = FileManager.default.createFile(atPath: events, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestProcess.devaccessBinary)
        // A socket nothing listens at: the status must not need devaccessd.
        process.arguments = ["monitor", "--json", "--user", erin.name, "--state-dir", setup.daemon.stateDirectory,
                             "--socket", scratch.path + "/none.sock"]
        process.environment = ["DEVACCESS_TEST_DEVICES": setup.devices, "DEVACCESS_TEST_UEVENTS": events,
                               "PATH": "/usr/bin:/bin"]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(20)
        var lines: [[String: Any]] = []
        while Date() < deadline {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            lines = Self.devices(text.split(separator: "\n").compactMap { try? json(String($0)) })
            if lines.count >= 3 { break }
            usleep(10_000)
        }
        #expect(lines.map(Self.brief) == [
            "snapshot camera camera:test-video-index0 denied", "snapshot camera camera:test-video-index1 denied",
            "snapshot microphone - unavailable",
        ], "\(lines)")
        #expect(lines.allSatisfy { $0["decisionsUnknown"] == nil }, "\(lines)")
    }

    /// The attack: mallory watches erin's camera status (when erin is denied, granted, or
    /// switched off) with `monitor --user erin`. As for `status`, only root and
    /// devaccess-admin may: exit 77, and not one line about erin's devices.
    @Test func anotherUsersStatusIsRefusedAsStatusRefusesIt() throws {
        let erin = try TestUser("monvict")
        let mallory = try TestUser("monspy")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        let result = try mallory.run(TestProcess.devaccessBinary, ["monitor", "--json", "--user", erin.name],
                                     environment: ["DEVACCESS_TEST_DEVICES": setup.devices,
                                                   "DEVACCESS_TEST_UEVENTS": setup.nodes.path + "/none.jsonl",
                                                   "DEVACCESS_STATE_DIR": setup.daemon.stateDirectory,
                                                   "DEVACCESS_SOCKET": setup.daemon.socketPath])
        #expect(result.status == 77, "\(result.stdout) \(result.stderr)")
        #expect(!result.stdout.contains("snapshot"), "\(result.stdout)")
        #expect(result.stderr.contains("only root and members of group"), "\(result.stderr)")
    }

    /// devaccessd gone: the status comes from the nodes and the policy alone, and every line
    /// says the decisions are unknown (and why) instead of passing it off as the truth.
    @Test func withoutDevaccessdEveryLineSaysTheDecisionsAreUnknown() throws {
        let erin = try TestUser("monaway")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        let denied = try TestProcess.devaccess(["deny", "camera", "--user", erin.name, "--socket", setup.daemon.socketPath])
        #expect(denied.status == 0, "\(denied.stdout) \(denied.stderr)")
        #expect(setup.daemon.stop() == 0)
        let monitor = try setup.monitor(erin)
        let snapshot = try Self.waitForDeviceLines(monitor, 3)
        let unknown = snapshot.filter { ($0["decisionsUnknown"] as? String)?.contains("devaccessd not reachable") == true }
        #expect(unknown.count == 3, "\(monitor.text)")
    }
}
