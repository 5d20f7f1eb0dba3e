import Foundation
import Testing
import DevAccessTestSupport

/// Enumeration and classification against fake sysfs/udev trees (umockdev): shapes
/// the VM's drivers do not give, such as a UVC camera with its metadata node, an
/// HDMI card that only plays, or a node udev never processed.
///
/// umockdev's /dev nodes are symlinks into its test bed, so devaccess (rightly)
/// refuses to trust them as device nodes; these tests check what was found and how
/// it was classified, and the real-ACL and VM tests check node access.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/umockdev-run"),
                "umockdev-run is not installed (apt-get install umockdev)"))
struct UmockdevTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/umockdev")

    func devices(_ fixture: String, _ permission: String) throws -> [String: Any] {
        let result = try TestProcess.run("/usr/bin/umockdev-run", [
            "-d", UmockdevTests.fixtures.appendingPathComponent(fixture).path, "--",
            TestProcess.devaccessBinary, "devices", permission, "--json",
        ])
        #expect(result.status == 0, "devaccess devices under umockdev: \(result.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let permissions = try #require(document?["permissions"] as? [[String: Any]])
        return try #require(permissions.first)
    }

    func ids(_ inventory: [String: Any]) -> [String] {
        (inventory["devices"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }.sorted()
    }

    func notes(_ inventory: [String: Any]) -> [String] {
        (inventory["notes"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
    }

    @Test func onlyVideoCaptureNodesAreCameras() throws {
        let cameras = try devices("vivid-and-uvc.umockdev", "camera")
        #expect(ids(cameras) == ["camera:pci-0000:00:14.0-usb-0:6:1.0-video-index0",
                                 "camera:platform-vivid.0-video-index0"])
        let devices = try #require(cameras["devices"] as? [[String: Any]])
        let names = devices.compactMap { $0["name"] as? String }.sorted()
        #expect(names == ["Integrated Camera: Integrated C", "vivid-000-vid-cap"])
        let notes = notes(cameras)
        // Output, metadata (UVC index1), VBI, radio and touch nodes are each left out, with why.
        #expect(notes.contains("/dev/video1: not a video capture node (video_output)"))
        #expect(notes.contains("/dev/video3: not a video capture node (no capture capability)"))
        #expect(notes.contains("/dev/vbi0: a vbi node, not a video node"))
        #expect(notes.contains("/dev/radio0: a radio node, not a video node"))
        #expect(notes.contains("/dev/v4l-touch0: a v4l-touch node, not a video node"))
    }

    @Test func fakeNodesAreNotTrusted() throws {
        let cameras = try devices("vivid-and-uvc.umockdev", "camera")
        let devices = try #require(cameras["devices"] as? [[String: Any]])
        for device in devices {
            let nodes = try #require(device["nodes"] as? [[String: Any]])
            #expect(nodes.count == 1)
            #expect((nodes.first?["problem"] as? String)?.contains("not a character device") == true)
        }
    }

    @Test func unclassifiableNodeIsLeftOutWithAReason() throws {
        let cameras = try devices("camera-without-udev-data.umockdev", "camera")
        #expect(ids(cameras).isEmpty)
        #expect(cameras["unavailableReason"] as? String == "no camera: 1 video4linux node(s), none captures video")
        #expect(notes(cameras).contains { $0.contains("/dev/video0: cannot tell whether it captures video") })
    }

    @Test func captureDevicesOfEveryCardAreMicrophones() throws {
        let microphones = try devices("sound-cards.umockdev", "microphone")
        #expect(ids(microphones) == ["microphone:platform-snd_dummy.0-pcm0c", "microphone:platform-snd_dummy.0-pcm1c"])
        let devices = try #require(microphones["devices"] as? [[String: Any]])
        for device in devices {
            let nodes = try #require(device["nodes"] as? [[String: Any]])
            #expect(nodes.compactMap { $0["role"] as? String } == ["capture", "control"])
            #expect(nodes.last?["path"] as? String == "/dev/snd/controlC0")
        }
        let paths = devices.flatMap { ($0["nodes"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String } }
        #expect(!paths.contains("/dev/snd/pcmC0D0p") && !paths.contains("/dev/snd/pcmC1D3p"))
    }

    @Test func aCardThatOnlyPlaysIsNoMicrophone() throws {
        let microphones = try devices("playback-only.umockdev", "microphone")
        #expect(ids(microphones).isEmpty)
        #expect(microphones["unavailableReason"] as? String == "no capture device: 1 sound card(s), none with a capture PCM")
    }
}

extension UmockdevTests {
    /// vivid with n_devs=2: both instances hang off platform device vivid.0, so udev's
    /// by-path name is the same for both; the ids must still differ.
    @Test func camerasSharingAPathGetDistinctIDs() throws {
        let cameras = try devices("vivid-two-instances.umockdev", "camera")
        #expect(ids(cameras) == ["camera:platform-vivid.0-video-index0~vivid-000-vid-cap",
                                 "camera:platform-vivid.0-video-index0~vivid-001-vid-cap"])
    }
}
