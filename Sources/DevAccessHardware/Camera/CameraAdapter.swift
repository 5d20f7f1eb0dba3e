import DevAccessCore

/// Cameras: udev's video4linux devices whose node captures video.
///
/// VIDIOC_QUERYCAP decides when the node can be opened; when it
/// cannot (an unprivileged caller, no driver behind a mocked node), udev's
/// ID_V4L_CAPABILITIES, which udev's v4l_id set as root, decides instead. A node
/// neither can classify is left out and said so. A UVC camera's metadata node and
/// vivid's output, VBI, radio, SDR and touch nodes are therefore not cameras.
public enum CameraAdapter {
    static let attributes = ["name", "index"]

    /// The kernel names of the only video4linux nodes that can be cameras (`classify` refuses
    /// every other name before it looks further: vbi, radio, swradio, v4l-touch, v4l-subdev).
    static let cameraSysnames = ["video*"]

    /// `openNodes: false` prefers udev's ID_V4L_CAPABILITIES and opens a node only when
    /// udev has no answer: enforcement runs often and must not wake cameras each time.
    /// `videoNodesOnly`: udev is asked only for `video*` nodes (a hotplug pass: vivid has
    /// 4 of its 10 nodes there). The cameras and their ids are the same as from the whole
    /// list, since ids are made unique among cameras only; the notes about the other nodes
    /// and the count of nodes in `unavailableReason` are left out.
    public static func probe(udev: Udev, openNodes: Bool = true, videoNodesOnly: Bool = false) -> AdapterReport {
        let nodes: [UdevDevice]
        do {
            nodes = try udev.devices(subsystem: "video4linux", attributes: attributes,
                                     sysnames: videoNodesOnly ? cameraSysnames : [])
        } catch {
            return AdapterReport(permission: .camera, devices: [], unavailableReason: error.description)
        }
        return report(nodes, openNodes: openNodes)
    }

    /// The cameras among udev's video4linux `nodes`, ids made unique among them.
    static func report(_ nodes: [UdevDevice], openNodes: Bool) -> AdapterReport {
        var devices: [Device] = []
        var notes: [Reason] = []
        for node in nodes {
            switch classify(node, openNodes: openNodes) {
            case .camera(let device, let note):
                devices.append(device)
                if let note { notes.append(note) }
            case .notCamera(let note):
                notes.append(note)
            }
        }
        devices = disambiguated(devices)
        if devices.isEmpty {
            let why = nodes.isEmpty
                ? "no video devices on this machine (udev lists none in 'video4linux')"
                : "no camera: \(nodes.count) video4linux node(s), none captures video"
            return AdapterReport(permission: .camera, devices: [], unavailableReason: why, notes: notes)
        }
        return AdapterReport(permission: .camera, devices: devices, notes: notes)
    }

    public enum Classification: Sendable {
        case camera(Device, note: Reason?)
        case notCamera(Reason)
    }

    public static func classify(_ node: UdevDevice, openNodes: Bool = true) -> Classification {
        guard let devnode = node.devnode else {
            return .notCamera(Reason(.skipped, "\(node.sysname): no device node"))
        }
        // The kernel names nodes by type: video*, vbi*, radio*, swradio*, v4l-touch*, v4l-subdev*.
        guard node.sysname.hasPrefix("video") else {
            return .notCamera(Reason(.skipped, "\(devnode): a \(nodeType(node.sysname)) node, not a video node"))
        }
        var capability: V4L2Capability?
        var note: Reason?
        if openNodes || node.properties["ID_V4L_CAPABILITIES"] == nil {
            do {
                capability = try V4L2Capability.query(node: devnode, major: node.major, minor: node.minor)
            } catch {
                note = Reason(.probe, "\(devnode): \(error.description); classified from udev's ID_V4L_CAPABILITIES")
            }
        }
        let isCapture: Bool
        let roles: [String]
        if let capability {
            isCapture = capability.isVideoCapture
            roles = capability.roles
        } else if let udevCaps = node.properties["ID_V4L_CAPABILITIES"] {
            (roles, isCapture) = udevCapabilities(udevCaps)
        } else {
            return .notCamera(Reason(.skipped,
                "\(devnode): cannot tell whether it captures video (VIDIOC_QUERYCAP not possible and udev " +
                "has no ID_V4L_CAPABILITIES; is systemd-udevd running?)"))
        }
        guard isCapture else {
            let what = roles.isEmpty ? "no capture capability" : roles.joined(separator: ", ")
            return .notCamera(Reason(.skipped, "\(devnode): not a video capture node (\(what))"))
        }
        let name = node.attributes["name"] ?? capability?.card ?? node.sysname
        var details: [String: String] = ["capabilities": roles.joined(separator: ",")]
        if let card = capability?.card { details["card"] = card }
        let device = Device(
            permission: .camera,
            id: stableID(node),
            name: name,
            driver: capability?.driver ?? node.parentDriver,
            bus: capability?.busInfo ?? node.properties["ID_PATH"],
            nodes: [DeviceNode(path: devnode, role: "capture", required: .readWrite,
                               state: NodeState.inspect(devnode, major: node.major, minor: node.minor))],
            details: details)
        return .camera(device, note: note)
    }

    /// udev's ID_V4L_CAPABILITIES (`:capture:`, `:video_output:`, ...): its words, and whether
    /// they make a capture node (capture, and not a touch sensor).
    static func udevCapabilities(_ text: String) -> (roles: [String], isCapture: Bool) {
        let roles = text.split(separator: ":").map(String.init)
        return (roles, roles.contains("capture") && !roles.contains("touch"))
    }

    /// Like udev's /dev/v4l/by-path and by-id links: the port path (or the device's
    /// serial) plus the node index, so the id survives reboots and renumbering.
    static func stableID(_ node: UdevDevice) -> String {
        let index = node.attributes["index"] ?? "0"
        if let path = node.properties["ID_PATH"], !path.isEmpty {
            return "camera:\(path)-video-index\(index)"
        }
        if let serial = node.properties["ID_SERIAL"], !serial.isEmpty {
            return "camera:serial-\(serial)-video-index\(index)"
        }
        let base = node.parentSyspath ?? node.syspath
        return "camera:sysfs-\(UdevDevice.sysfsID(base))-video-index\(index)"
    }

    /// udev's by-path name is not always unique: vivid with n_devs=2 hangs both
    /// instances off one platform device, and both claim `platform-vivid.0-video-index0`.
    /// Devices that share an id get their sysfs name (`vivid-001-vid-cap`) appended,
    /// which needs no privilege to read and does not change with node numbering; the
    /// node name is the last resort when even the names are equal.
    static func disambiguated(_ devices: [Device]) -> [Device] {
        let byName = appendingWhereShared(devices) { $0.name }
        return appendingWhereShared(byName) { $0.nodes.first.map { String($0.path.split(separator: "/").last ?? "") } ?? "" }
    }

    private static func appendingWhereShared(_ devices: [Device], _ suffix: (Device) -> String) -> [Device] {
        let counts = Dictionary(devices.map { ($0.id, 1) }, uniquingKeysWith: +)
        return devices.map { device in
            guard counts[device.id, default: 0] > 1 else { return device }
            var renamed = device
            renamed.id += "~" + String(suffix(device).map { $0.isWhitespace || $0 == "/" ? "_" : $0 })
            return renamed
        }
    }

    static func nodeType(_ sysname: String) -> String {
        for prefix in ["v4l-subdev", "v4l-touch", "swradio", "radio", "vbi"] where sysname.hasPrefix(prefix) {
            return prefix
        }
        return "non-video"
    }
}
