/// Turns udev events plus a fresh probe into device add/remove/change events.
///
/// A device is added or removed only by the udev event of its own capture node, so
/// an event carries that node's devnode and SEQNUM even when the probe triggered by
/// an earlier event (a sibling node, the card) already saw the device. Until then a
/// newly seen device is left pending, and a device whose node vanished stays known.
/// Any other difference in a known device's nodes (owner, mode, ACL, a node added)
/// is a `change`.
public struct HotplugTracker: Sendable {
    public enum Kind: String, Sendable {
        case add, remove, change
    }

    public struct Change: Sendable, Equatable {
        public var kind: Kind
        public var device: Device
    }

    /// Known devices in the order they were first seen.
    public private(set) var known: [Device]

    public init(initial: [Device]) {
        known = initial
    }

    public mutating func apply(action: String, devnode: String?, probed: [Device]) -> [Change] {
        var changes: [Change] = []
        if action == "remove", let devnode,
           let index = known.firstIndex(where: { Self.captureNode($0) == devnode }) {
            changes.append(Change(kind: .remove, device: known.remove(at: index)))
        }
        for device in probed {
            if let index = known.firstIndex(where: { $0.id == device.id }) {
                if known[index].nodes != device.nodes {
                    known[index] = device
                    changes.append(Change(kind: .change, device: device))
                }
            } else if action != "remove", let devnode, Self.captureNode(device) == devnode {
                known.append(device)
                changes.append(Change(kind: .add, device: device))
            }
        }
        return changes
    }

    /// Takes a fresh probe of every device as the truth when the events in between were
    /// lost (more than the queue keeps): what is gone is removed, what is new is added, a
    /// device whose nodes differ is a change. Known devices keep their order.
    public mutating func resync(probed: [Device]) -> [Change] {
        var changes: [Change] = []
        let probedIDs = Set(probed.map(\.id))
        for device in known where !probedIDs.contains(device.id) {
            changes.append(Change(kind: .remove, device: device))
        }
        known.removeAll { !probedIDs.contains($0.id) }
        for device in probed {
            if let index = known.firstIndex(where: { $0.id == device.id }) {
                if known[index].nodes != device.nodes {
                    known[index] = device
                    changes.append(Change(kind: .change, device: device))
                }
            } else {
                known.append(device)
                changes.append(Change(kind: .add, device: device))
            }
        }
        return changes
    }

    /// One change as `resync` gave it, applied alone (to step through a resync's changes).
    public mutating func take(_ change: Change) {
        switch change.kind {
        case .remove:
            known.removeAll { $0.id == change.device.id }
        case .change:
            if let index = known.firstIndex(where: { $0.id == change.device.id }) { known[index] = change.device }
        case .add:
            known.append(change.device)
        }
    }

    public static func captureNode(_ device: Device) -> String? {
        device.nodes.first { $0.role == "capture" }?.path
    }
}
