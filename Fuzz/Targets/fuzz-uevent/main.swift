import DevAccessCore
@testable import DevAccessHardware
@testable import DevAccessBroker
import FuzzSupport

/// Uevents as the netlink socket hands them to devaccessd's udev monitor: the input is one
/// or more events, each ended by an empty entry (two NULs in a row); an event is the kernel's
/// form (an `ACTION@DEVPATH` header, then NUL-separated KEY=VALUE entries) or udev's (the
/// KEY=VALUE entries alone). Each event becomes a `UdevDevice` the way libudev makes one of
/// a received event, then goes through what devaccess does with one: the node-event
/// decision (`UdevNodeEvent`), the hotplug queue (`NodeEventQueue`), the subsystem's
/// permission, camera and microphone identification from its properties and node name, and
/// a `HotplugTracker` whose probe is the devices the events so far brought.

/// The events one input carries (at most this many: enough for a queue overflow).
let maxEvents = 64
let queueLimit = 8

struct Uevent {
    var pairs: [(name: String, value: String?)] = []
    var headerAction: String?
}

/// Splits the input into events; an entry with no `=` (other than the header) makes libudev
/// drop the whole message, and so it drops the event here.
func events(_ input: [UInt8]) -> [Uevent] {
    var result: [Uevent] = []
    var current = Uevent()
    var entries = 0
    var broken = false
    for entry in input.split(separator: 0, omittingEmptySubsequences: false) {
        if entry.isEmpty {
            if entries > 0 && !broken { result.append(current) }
            if result.count == maxEvents { break }
            current = Uevent()
            entries = 0
            broken = false
            continue
        }
        defer { entries += 1 }
        if let equals = entry.firstIndex(of: UInt8(ascii: "=")) {
            current.pairs.append((String(decoding: entry[..<equals], as: UTF8.self),
                                  String(decoding: entry[(equals + 1)...], as: UTF8.self)))
        } else if entries == 0, let at = entry.firstIndex(of: UInt8(ascii: "@")) {
            current.headerAction = String(decoding: entry[..<at], as: UTF8.self)
        } else {
            broken = true
        }
    }
    if entries > 0 && !broken && result.count < maxEvents { result.append(current) }
    return result
}

/// What libudev's getters return for a received event with these properties.
func device(_ properties: [String: String]) -> UdevDevice {
    let devpath = properties["DEVPATH"] ?? ""
    let syspath = "/sys" + devpath
    let last = devpath.split(separator: "/").last.map(String.init) ?? ""
    let devnode = properties["DEVNAME"].map { $0.hasPrefix("/") ? $0 : "/dev/" + $0 }
    let parent = devpath.split(separator: "/").count > 1
        ? "/sys" + devpath.split(separator: "/").dropLast().map { "/" + $0 }.joined() : nil
    return UdevDevice(syspath: syspath, sysname: String(last.map { $0 == "!" ? "/" : $0 }),
                      subsystem: properties["SUBSYSTEM"], devnode: devnode,
                      major: properties["MAJOR"].flatMap { UInt32($0) } ?? 0,
                      minor: properties["MINOR"].flatMap { UInt32($0) } ?? 0,
                      action: properties["ACTION"], seqnum: properties["SEQNUM"].flatMap { UInt64($0) } ?? 0,
                      properties: properties, parentSyspath: parent)
}

/// Whether `path` names a node below /dev, found another way than `UdevNodeEvent`: the path
/// resolved by its `.` and `..` components must be itself, absolute and below /dev/.
func plainNodeBelowDev(_ path: String) -> Bool {
    let bytes = Array(path.utf8)
    let slash = UInt8(ascii: "/")
    guard bytes.count < 4096, !bytes.contains(0), bytes.first == slash else { return false }
    var resolved: [ArraySlice<UInt8>] = []
    for component in bytes.split(separator: slash) {
        if component.elementsEqual([UInt8(ascii: ".")]) { continue }
        if component.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { _ = resolved.popLast(); continue }
        resolved.append(component)
    }
    let normal = resolved.flatMap { [slash] + $0 }
    return normal == bytes && resolved.count >= 2 && resolved[0].elementsEqual("dev".utf8)
}

/// The device a hotplug probe would find behind an event's node, from what the event says.
func probedDevice(_ device: UdevDevice, devnode: String, permission: Permission) -> Device? {
    let node = { (path: String, role: String) in
        DeviceNode(path: path, role: role, required: .readWrite,
                   state: .present(NodeFacts(path: path, kind: .characterDevice, major: device.major,
                                             minor: device.minor, ownerUID: 0, groupGID: 0, mode: 0o660)))
    }
    switch permission {
    case .camera:
        let (roles, isCapture) = CameraAdapter.udevCapabilities(device.properties["ID_V4L_CAPABILITIES"] ?? "")
        fuzzCheck(roles.allSatisfy { !$0.isEmpty && !$0.contains(":") }, "capability word \(roles)")
        fuzzCheck(isCapture == (roles.contains("capture") && !roles.contains("touch")), "capture from \(roles)")
        let id = CameraAdapter.stableID(device)
        fuzzCheck(id.hasPrefix("camera:") && id.hasSuffix("-video-index0"), "camera id \(id)")
        if !device.sysname.hasPrefix("video") {
            _ = CameraAdapter.nodeType(device.sysname)
            return nil
        }
        guard isCapture else { return nil }
        return Device(permission: .camera, id: id, name: device.sysname, bus: device.properties["ID_PATH"],
                      nodes: [node(devnode, "capture")])
    case .microphone:
        guard let card = MicrophoneAdapter.cardNumber(ofNode: devnode) else { return nil }
        let name = devnode.split(separator: "/").last.map(String.init) ?? ""
        fuzzCheck(card >= 0 && (name == "controlC\(card)" || name.hasPrefix("pcmC\(card)D")),
                  "node \(name) taken as card \(card)")
        guard let pcm = MicrophoneAdapter.captureDeviceNumber(device.sysname, card: card) else { return nil }
        fuzzCheck(pcm >= 0 && device.sysname == "pcmC\(card)D\(pcm)c", "\(device.sysname) taken as capture PCM \(pcm)")
        let base = device.properties["ID_PATH"].flatMap { $0.isEmpty ? nil : $0 } ?? "card-\(card)"
        return Device(permission: .microphone, id: "microphone:\(base)-pcm\(pcm)c", name: device.sysname,
                      nodes: [node(devnode, "capture")])
    default:
        return nil
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzUevent(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var queue = NodeEventQueue(limit: queueLimit)
    var trackers: [Permission: HotplugTracker] = [:]
    var present: [Permission: [String: Device]] = [:]
    for uevent in events(fuzzInput(data, size)) {
        let properties = UdevDevice.properties(uevent.pairs)
        for (name, value) in uevent.pairs where properties[name] == nil {
            fuzzCheck(false, "property \(name)=\(value ?? "") lost")
        }
        // udev's property list, written back as KEY=VALUE entries, reads back the same.
        var written: [UInt8] = []
        for (name, value) in properties.sorted(by: { $0.key < $1.key }) {
            written += Array("\(name)=\(value)".utf8) + [0]
        }
        let reread = events(written + [0])
        fuzzCheck(properties.isEmpty ? reread.isEmpty
                      : reread.count == 1 && UdevDevice.properties(reread[0].pairs) == properties,
                  "properties do not read back: \(properties)")

        let device = device(properties)
        fuzzCheck(device.currentTags.allSatisfy { !$0.isEmpty && !$0.contains(":") }, "tags \(device.currentTags)")
        fuzzCheck(!UdevDevice.sysfsID(device.syspath).contains("/"), "sysfs id of \(device.syspath)")

        let event = UdevNodeEvent(device)
        let expected = device.action.map { UdevNodeEvent.actions.contains($0) } == true
            && device.subsystem.map { !$0.isEmpty } == true && device.devnode.map(plainNodeBelowDev) == true
        fuzzCheck((event != nil) == expected,
                  "\(event == nil ? "dropped" : "took") action \(device.action ?? "-") subsystem "
                  + "\(device.subsystem ?? "-") node \(device.devnode ?? "-")")
        guard let event else { continue }
        fuzzCheck(event.devnode.hasPrefix("/dev/") && event.devnode == device.devnode
                  && event.action == device.action && event.seqnum == device.seqnum, "event \(event)")

        let hotplug = HotplugEvent(event, kernelArrival: nil, received: 0)
        queue.add(hotplug)
        fuzzCheck(queue.count <= queueLimit, "\(queue.count) queued, limit \(queueLimit)")
        fuzzCheck(queue.overflowed ? queue.count == 0 && queue.dropped > queueLimit
                      : queue.events.contains { $0.devnode == event.devnode && $0.action == event.action
                                                && $0.seqnum == event.seqnum },
                  "queue lost \(event.action) \(event.devnode)")

        guard let permission = LiveEnforcer.subsystemPermissions[event.subsystem] else { continue }
        var machine = present[permission] ?? [:]
        if event.action == "remove" {
            machine[event.devnode] = nil
        } else {
            machine[event.devnode] = probedDevice(device, devnode: event.devnode, permission: permission)
        }
        present[permission] = machine
        var probed = machine.keys.sorted().compactMap { machine[$0] }
        if permission == .camera { probed = CameraAdapter.disambiguated(probed) }

        var tracker = trackers[permission] ?? HotplugTracker(initial: [])
        for change in tracker.apply(action: event.action, devnode: event.devnode, probed: probed) {
            let node = HotplugTracker.captureNode(change.device)
            switch change.kind {
            case .add:
                fuzzCheck(event.action != "remove" && node == event.devnode, "added \(change.device.id) at \(event)")
            case .remove:
                fuzzCheck(event.action == "remove" && node == event.devnode, "removed \(change.device.id) at \(event)")
            case .change:
                break
            }
        }
        fuzzCheck(Set(tracker.known.map(\.id)).count == tracker.known.count, "tracker knows an id twice")
        trackers[permission] = tracker
    }
    return 0
}

runFuzzer(fuzzUevent)
