import Foundation
import Glibc
import Testing
import DevAccessTestSupport
import DevAccessSystem

/// `devaccess monitor` is devaccessd's status-update stream and tells the truth: the status it
/// prints is the one `status` gives (the ledger's denial, the policy's restriction), it prints
/// the current state before any change, and without devaccessd it says so and exits 69. A
/// real devaccessd with two declared cameras whose nodes anyone may open (so the nodes alone
/// would say authorized), real users; a declared node removed or made again is devaccessd's
/// hotplug (inotify: a test host has no udevd; Tests/UseCase/VM's hotplug scenario runs udev's).
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes and users"))
struct MonitorTests {
    final class Setup {
        let nodes: TemporaryDirectory
        let config: TemporaryDirectory
        let daemon: RunningDaemon
        let cameras: [String]
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
            try Data(policy.utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
            daemon = try RunningDaemon(arguments: ["--config-dir", config.path],
                                       environment: ["DEVACCESS_TEST_DEVICES": devices])
        }

        /// `devaccess monitor --json` as `user`, at this devaccessd.
        func monitor(_ user: TestUser) throws -> RunningProbe {
            try RunningProbe(user, socket: daemon.socketPath, ["monitor", "--json"], binary: TestProcess.devaccessBinary,
                             environment: ["DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_SOCKET": daemon.socketPath])
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
        return "\(event) \(id) \(line["previousStatus"] ?? "?")->\(line["status"] ?? "?")"
    }

    /// The attack on the old monitor: a user with a standing denial (erin) and one the policy
    /// forbids the camera (rita), on nodes mode 0666, were told `authorized`. Now: the snapshot
    /// says denied / restricted for every camera and the microphone line says there is none,
    /// before any change; a camera's node going and coming back is a change of that camera
    /// with the status unchanged; never authorized. (Two removes in one update, `X->X` then
    /// `X->unavailable`: HotplugStatusModelTests, and the VM's hotplug scenario on udev.)
    @Test func aDenialAndARestrictionShowInTheSnapshotAndInEveryUpdate() throws {
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

            // The node goes: devaccessd's update shows that camera changed, still \(word).
            try FileManager.default.removeItem(atPath: setup.cameras[0])
            let removed = try Self.waitForDeviceLines(monitor, 4)
            #expect(removed.dropFirst(3).map(Self.brief) == ["change camera:test-video-index0 \(word)->\(word)"],
                    "\(user.name): \(monitor.text)")
            // And comes back.
            _ = try setup.nodes.makeNullNode("video0", mode: "0666")
            let added = try Self.waitForDeviceLines(monitor, 5)
            #expect(added.dropFirst(4).map(Self.brief) == ["change camera:test-video-index0 \(word)->\(word)"],
                    "\(user.name): \(monitor.text)")
            #expect(!monitor.text.contains("authorized"), "\(user.name) was told authorized: \(monitor.text)")
            #expect(monitor.process.isRunning)
        }
    }

    /// A decision with no device change is a `status` line: the stream shows what `status`
    /// would say after a deny and after a reset, as devaccessd pushes it.
    @Test func aDecisionIsAStatusLine() throws {
        let erin = try TestUser("mondecide")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        let monitor = try setup.monitor(erin)
        let snapshot = try Self.waitForDeviceLines(monitor, 3)
        let before = snapshot.first?["status"] as? String ?? "?"
        #expect(before != "denied", "\(monitor.text)")
        let denied = try TestProcess.devaccess(["deny", "camera", "--user", erin.name, "--socket", setup.daemon.socketPath])
        #expect(denied.status == 0, "\(denied.stdout) \(denied.stderr)")
        let lines = try Self.waitForDeviceLines(monitor, 4)
        #expect(lines.dropFirst(3).map(Self.brief) == ["status - \(before)->denied"], "\(monitor.text)")
        let reset = try TestProcess.devaccess(["reset", "camera", "--user", erin.name, "--socket", setup.daemon.socketPath])
        #expect(reset.status == 0, "\(reset.stdout) \(reset.stderr)")
        let again = try Self.waitForDeviceLines(monitor, 5)
        #expect(again.dropFirst(4).map(Self.brief) == ["status - denied->\(before)"], "\(monitor.text)")
    }

    /// monitor follows the caller alone (devaccessd's subscription is the peer's): the attack
    /// was mallory watching erin's camera status with `monitor --user erin`. The option is
    /// gone: a usage error, and not one line about erin's devices.
    @Test func anotherUsersStatusCannotBeWatched() throws {
        let erin = try TestUser("monvict")
        let mallory = try TestUser("monspy")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        let result = try mallory.run(TestProcess.devaccessBinary, ["monitor", "--json", "--user", erin.name],
                                     environment: ["DEVACCESS_TEST_DEVICES": setup.devices,
                                                   "DEVACCESS_SOCKET": setup.daemon.socketPath])
        #expect(result.status == 64, "\(result.stdout) \(result.stderr)")
        #expect(!result.stdout.contains("snapshot"), "\(result.stdout)")
        #expect(result.stderr.contains("unknown option '--user'"), "\(result.stderr)")
    }

    /// devaccessd gone: there is no status to follow. monitor says so, and what to do, and
    /// exits 69, printing nothing on stdout (it used to print the nodes' and policy's status
    /// with "decisionsUnknown"); root too, who used to read the ledger itself.
    @Test func withoutDevaccessdItSaysSoAndExits69() throws {
        let erin = try TestUser("monaway")
        let setup = try Setup(policy: "[camera]\nDefault=ask\n")
        #expect(setup.daemon.stop() == 0)
        let asErin = try erin.run(TestProcess.devaccessBinary, ["monitor", "--json"],
                                  environment: ["DEVACCESS_TEST_DEVICES": setup.devices,
                                                "DEVACCESS_SOCKET": setup.daemon.socketPath])
        let scratch = try TemporaryDirectory()
        // A socket nothing listens at.
        let asRoot = try TestProcess.devaccess(["monitor", "--socket", scratch.path + "/none.sock"],
                                               environment: ["DEVACCESS_TEST_DEVICES": setup.devices])
        for result in [asErin, asRoot] {
            #expect(result.status == 69, "\(result.stdout) \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(result.stdout)")
            #expect(result.stderr.contains("monitor follows devaccessd's status updates")
                    && result.stderr.contains(DaemonStart.advice()), "\(result.stderr)")
        }
    }
}
