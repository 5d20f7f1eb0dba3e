/// What devaccessd acts on in a udev event: a device node added, changed, removed or moved,
/// from the event's own ACTION, SUBSYSTEM, DEVNAME and SEQNUM (as libudev returns them).
/// Pure, so the monitor thread and the `uevent` fuzz target (docs/fuzzing.md) run the same
/// decision.
public struct UdevNodeEvent: Sendable, Hashable {
    public var action: String
    public var subsystem: String
    /// The node's absolute path, a plain path below /dev (`isNodePath`).
    public var devnode: String
    public var seqnum: UInt64

    /// The actions that are about a node. `bind`/`unbind` (a driver) and `online`/`offline`
    /// (a CPU or memory block) never name one devaccess gates.
    public static let actions: Set<String> = ["add", "change", "remove", "move"]

    /// nil when the event is not a node event devaccessd acts on: no node (a sound card's or
    /// a USB interface's event: its nodes have events of their own), no subsystem, another
    /// action, or a node path that is not a plain path below /dev.
    public init?(action: String?, subsystem: String?, devnode: String?, seqnum: UInt64) {
        guard let action, Self.actions.contains(action),
              let subsystem, !subsystem.isEmpty,
              let devnode, Self.isNodePath(devnode) else { return nil }
        self.action = action
        self.subsystem = subsystem
        self.devnode = devnode
        self.seqnum = seqnum
    }

    public init?(_ device: UdevDevice) {
        self.init(action: device.action, subsystem: device.subsystem, devnode: device.devnode, seqnum: device.seqnum)
    }

    /// A path the kernel could have named a node at: `/dev/` and one or more components,
    /// none empty, `.` or `..`, no NUL, shorter than PATH_MAX. libudev puts every DEVNAME
    /// below /dev; a path that climbs out of it or repeats a slash is no node of any device,
    /// so an event naming one is dropped rather than handed to an engine pass that matches
    /// node paths by text.
    public static func isNodePath(_ path: String) -> Bool {
        let bytes = Array(path.utf8)
        guard bytes.count < 4096, bytes.starts(with: "/dev/".utf8), !bytes.contains(0) else { return false }
        let components = bytes.dropFirst(5).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        return components.allSatisfy { !$0.isEmpty && !$0.elementsEqual(".".utf8) && !$0.elementsEqual("..".utf8) }
    }
}
