import Glibc
import Testing
@testable import DevAccessHardware

/// A hotplug pass asks udev only for `video*` nodes (`CameraAdapter.cameraSysnames`): the
/// cameras and their ids must be exactly those of the whole video4linux list, including ids
/// made unique because two cameras share udev's by-path name (vivid's instances), and
/// whatever udev says a non-video node can do.
@Suite struct CameraNarrowingTests {
    static func node(_ sysname: String, minor: UInt32, path: String?, index: String, name: String,
                     capabilities: String) -> UdevDevice {
        var properties = ["ID_V4L_CAPABILITIES": capabilities]
        if let path { properties["ID_PATH"] = path }
        return UdevDevice(syspath: "/sys/devices/platform/x/video4linux/\(sysname)", sysname: sysname,
                          subsystem: "video4linux", devnode: "/dev/\(sysname)", major: 81, minor: minor,
                          properties: properties, attributes: ["index": index, "name": name],
                          parentSyspath: "/sys/devices/platform/x")
    }

    static let list: [UdevDevice] = [
        // Two vivid instances on one platform device: both capture nodes claim index0.
        node("video0", minor: 0, path: "platform-vivid.0", index: "0", name: "vivid-000-vid-cap", capabilities: ":capture:"),
        node("video1", minor: 1, path: "platform-vivid.0", index: "1", name: "vivid-000-vid-out",
             capabilities: ":video_output:"),
        node("vbi0", minor: 2, path: "platform-vivid.0", index: "0", name: "vivid-000-vbi-cap", capabilities: ":capture:"),
        node("radio0", minor: 3, path: "platform-vivid.0", index: "0", name: "vivid-000-rad-rx", capabilities: ":radio:"),
        node("swradio0", minor: 4, path: "platform-vivid.0", index: "0", name: "vivid-000-sdr-cap",
             capabilities: ":capture:"),
        node("v4l-touch0", minor: 5, path: "platform-vivid.0", index: "0", name: "vivid-000-touch-cap",
             capabilities: ":capture:touch:"),
        node("video2", minor: 6, path: "platform-vivid.0", index: "0", name: "vivid-001-vid-cap", capabilities: ":capture:"),
        // Equal names too: the node name makes them unique.
        node("video3", minor: 7, path: "pci-0000:00:14.0-usb-0:6:1.0", index: "0", name: "Cam", capabilities: ":capture:"),
        node("video4", minor: 8, path: "pci-0000:00:14.0-usb-0:6:1.0", index: "0", name: "Cam", capabilities: ":capture:"),
        node("video5", minor: 9, path: nil, index: "0", name: "Other", capabilities: ":capture:"),
    ]

    @Test func videoNodesOnlyGiveTheSameCamerasAndIds() {
        let whole = CameraAdapter.report(Self.list, openNodes: false)
        let narrowed = CameraAdapter.report(Self.list.filter { node in
            CameraAdapter.cameraSysnames.contains { fnmatch($0, node.sysname, 0) == 0 }
        }, openNodes: false)
        #expect(narrowed.devices == whole.devices)
        #expect(whole.devices.map(\.id) == [
            "camera:platform-vivid.0-video-index0~vivid-000-vid-cap",
            "camera:platform-vivid.0-video-index0~vivid-001-vid-cap",
            "camera:pci-0000:00:14.0-usb-0:6:1.0-video-index0~Cam~video3",
            "camera:pci-0000:00:14.0-usb-0:6:1.0-video-index0~Cam~video4",
            "camera:sysfs-\(UdevDevice.sysfsID("/sys/devices/platform/x"))-video-index0",
        ])
    }
}
