import Testing
@testable import DevAccessHardware

/// What devaccessd takes from a udev event's properties (`UdevNodeEvent`, the property list,
/// ID_V4L_CAPABILITIES, sound node names): the pure part the udev monitor thread and the
/// `uevent` fuzz target share. The events are shaped as udevd sends them.
@Suite struct UdevEventTests {
    func device(action: String?, subsystem: String? = "video4linux", devnode: String?, seqnum: UInt64 = 4321) -> UdevDevice {
        UdevDevice(syspath: "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-6/1-6:1.0/video4linux/video0",
                   sysname: "video0", subsystem: subsystem, devnode: devnode, major: 81, minor: 0,
                   action: action, seqnum: seqnum)
    }

    @Test func nodeEventsOfEveryActionAreTaken() throws {
        for action in ["add", "change", "remove", "move"] {
            let event = try #require(UdevNodeEvent(device(action: action, devnode: "/dev/video0")))
            #expect(event == UdevNodeEvent(action: action, subsystem: "video4linux", devnode: "/dev/video0", seqnum: 4321))
        }
        #expect(UdevNodeEvent(action: "add", subsystem: "sound", devnode: "/dev/snd/pcmC0D0c", seqnum: 1) != nil)
        #expect(UdevNodeEvent(action: "remove", subsystem: "usb", devnode: "/dev/bus/usb/001/005", seqnum: 2) != nil)
    }

    /// A sound card's event has no node, a driver's bind names none devaccess gates: the
    /// nodes' own events carry them.
    @Test func eventsThatAreNotAboutANodeAreDropped() {
        #expect(UdevNodeEvent(device(action: "change", subsystem: "sound", devnode: nil)) == nil)
        #expect(UdevNodeEvent(device(action: "bind", devnode: "/dev/video0")) == nil)
        #expect(UdevNodeEvent(device(action: "unbind", devnode: "/dev/video0")) == nil)
        #expect(UdevNodeEvent(device(action: "online", devnode: "/dev/video0")) == nil)
        #expect(UdevNodeEvent(device(action: nil, devnode: "/dev/video0")) == nil)
        #expect(UdevNodeEvent(device(action: "add", subsystem: nil, devnode: "/dev/video0")) == nil)
        #expect(UdevNodeEvent(device(action: "add", subsystem: "", devnode: "/dev/video0")) == nil)
    }

    /// The engine pass an event starts matches node paths by text: a path that leaves /dev,
    /// or spells a node two ways, is no node of any device and is dropped.
    @Test func nodePathsThatAreNotPlainPathsBelowDevAreDropped() {
        for path in ["/dev/../etc/shadow", "/dev/snd/../../etc/shadow", "/dev/./video0", "/dev//video0",
                     "/dev/video0/", "/dev/", "/dev", "/devvideo0", "dev/video0", "video0", "/etc/shadow",
                     "/dev/snd/..", "/dev/video\u{0}0", "", "/dev/" + String(repeating: "a", count: 4091)] {
            #expect(UdevNodeEvent(device(action: "add", devnode: path)) == nil, "\(path) taken")
            #expect(!UdevNodeEvent.isNodePath(path), "\(path)")
        }
        for path in ["/dev/video0", "/dev/snd/pcmC0D0c", "/dev/bus/usb/001/005", "/dev/v4l-touch0", "/dev/..video",
                     "/dev/" + String(repeating: "a", count: 4090)] {
            #expect(UdevNodeEvent.isNodePath(path), "\(path)")
        }
    }

    @Test func aPropertyListBecomesTheDevicesProperties() {
        let properties = UdevDevice.properties([
            (name: "ACTION", value: "add"), (name: "ID_PATH", value: nil), (name: "TAGS", value: ":seat:"),
            (name: "TAGS", value: ":seat:uaccess:"),
        ])
        #expect(properties == ["ACTION": "add", "ID_PATH": "", "TAGS": ":seat:uaccess:"])
        #expect(UdevDevice.properties([]) == [:])
    }

    @Test func udevCapabilitiesTellCaptureNodes() {
        #expect(CameraAdapter.udevCapabilities(":capture:") == (["capture"], true))
        #expect(CameraAdapter.udevCapabilities(":capture:touch:") == (["capture", "touch"], false))
        #expect(CameraAdapter.udevCapabilities(":video_output:") == (["video_output"], false))
        #expect(CameraAdapter.udevCapabilities(":") == ([], false))
        #expect(CameraAdapter.udevCapabilities("") == ([], false))
    }

    /// Regression (found by the `uevent` fuzz target): a sound node's card and PCM numbers
    /// are read only as the kernel writes them, so `pcmC0000D0p`, `controlC+1` and
    /// `controlC-1` are no card's nodes and a capture PCM is `pcmC<card>D<n>c` exactly.
    /// A card udevd has not processed yet would give its microphones a passing id (no ID_PATH):
    /// while udevd runs it is left out until udevd is done; without udevd every card counts.
    @Test func aCardUdevdHasNotProcessedIsLeftOutWhileUdevdRuns() {
        let pending = UdevDevice(syspath: "/sys/devices/platform/snd_aloop.0/sound/card1", sysname: "card1",
                                 subsystem: "sound", isInitialized: false)
        var processed = pending
        processed.isInitialized = true
        #expect(!MicrophoneAdapter.isSettled(pending, udevdRuns: true))
        #expect(MicrophoneAdapter.isSettled(pending, udevdRuns: false))
        #expect(MicrophoneAdapter.isSettled(processed, udevdRuns: true))
        #expect(MicrophoneAdapter.isSettled(processed, udevdRuns: false))
    }

    @Test func soundNodeNumbersAreReadOnlyAsTheKernelWritesThem() {
        #expect(MicrophoneAdapter.cardNumber(ofNode: "/dev/snd/pcmC0D0c") == 0)
        #expect(MicrophoneAdapter.cardNumber(ofNode: "/dev/snd/pcmC12D3p") == 12)
        #expect(MicrophoneAdapter.cardNumber(ofNode: "/dev/snd/controlC1") == 1)
        #expect(MicrophoneAdapter.cardNumber(ofNode: "/dev/snd/controlC10") == 10)
        for path in ["/dev/snd/pcmC0000D0p", "/dev/snd/pcmC01D0c", "/dev/snd/pcmC+1D0c", "/dev/snd/pcmC-1D0c",
                     "/dev/snd/pcmCD0c", "/dev/snd/controlC+1", "/dev/snd/controlC-1", "/dev/snd/controlC01",
                     "/dev/snd/controlC", "/dev/snd/controlC1x", "/dev/snd/controlC99999999999999999999",
                     "/dev/snd/timer", "/dev/snd/seq"] {
            #expect(MicrophoneAdapter.cardNumber(ofNode: path) == nil, "\(path)")
        }
        #expect(MicrophoneAdapter.captureDeviceNumber("pcmC1D0c", card: 1) == 0)
        #expect(MicrophoneAdapter.captureDeviceNumber("pcmC1D10c", card: 1) == 10)
        for name in ["pcmC1D0p", "pcmC1D00c", "pcmC1D+1c", "pcmC1D-1c", "pcmC1Dc", "pcmC2D0c", "pcmC10D0c"] {
            #expect(MicrophoneAdapter.captureDeviceNumber(name, card: 1) == nil, "\(name)")
        }
    }
}
