import Testing
@testable import DevAccessCore

struct HotplugTrackerTests {
    func microphone(_ card: Int, controlMode: UInt32 = 0o660) -> Device {
        func node(_ path: String, _ role: String, _ mode: UInt32) -> DeviceNode {
            DeviceNode(path: path, role: role, required: .readWrite, state: .present(
                NodeFacts(path: path, kind: .characterDevice, ownerUID: 0, groupGID: 29, mode: mode)))
        }
        return Device(permission: .microphone, id: "microphone:card\(card)-pcm0c", name: "card \(card)", nodes: [
            node("/dev/snd/pcmC\(card)D0c", "capture", 0o660), node("/dev/snd/controlC\(card)", "control", controlMode),
        ])
    }

    @Test func addWaitsForTheDevicesOwnCaptureNodeEvent() {
        var tracker = HotplugTracker(initial: [])
        // The control node's event arrives first; the probe already sees the PCM.
        #expect(tracker.apply(action: "add", devnode: "/dev/snd/controlC1", probed: [microphone(1)]).isEmpty)
        let changes = tracker.apply(action: "add", devnode: "/dev/snd/pcmC1D0c", probed: [microphone(1)])
        #expect(changes == [HotplugTracker.Change(kind: .add, device: microphone(1))])
        #expect(tracker.known.map(\.id) == ["microphone:card1-pcm0c"])
    }

    @Test func removeComesFromTheOwnNodeAndKeepsTheID() {
        var tracker = HotplugTracker(initial: [microphone(1)])
        // A sibling vanished first: the device stays known until its own node goes.
        #expect(tracker.apply(action: "remove", devnode: "/dev/snd/pcmC1D0p", probed: []).isEmpty)
        let changes = tracker.apply(action: "remove", devnode: "/dev/snd/pcmC1D0c", probed: [])
        #expect(changes.map(\.kind) == [.remove])
        #expect(changes.first?.device.id == "microphone:card1-pcm0c")
        #expect(tracker.known.isEmpty)
    }

    @Test func nodeStateChangesOfKnownDevicesAreChanges() {
        var tracker = HotplugTracker(initial: [microphone(1, controlMode: 0o600)])
        let changes = tracker.apply(action: "change", devnode: "/dev/snd/controlC1", probed: [microphone(1)])
        #expect(changes == [HotplugTracker.Change(kind: .change, device: microphone(1))])
        #expect(tracker.apply(action: "change", devnode: "/dev/snd/controlC1", probed: [microphone(1)]).isEmpty)
    }

    /// Events lost to an overflow: the fresh probe is the truth. A card that went and one
    /// that came while nobody was told are a remove and an add; a changed one is a change.
    @Test func aResyncAfterLostEventsFindsWhatCameAndWent() {
        var tracker = HotplugTracker(initial: [microphone(1), microphone(2, controlMode: 0o600)])
        let changes = tracker.resync(probed: [microphone(2), microphone(3)])
        #expect(changes == [
            HotplugTracker.Change(kind: .remove, device: microphone(1)),
            HotplugTracker.Change(kind: .change, device: microphone(2)),
            HotplugTracker.Change(kind: .add, device: microphone(3)),
        ])
        #expect(tracker.known.map(\.id) == ["microphone:card2-pcm0c", "microphone:card3-pcm0c"])
        #expect(tracker.resync(probed: [microphone(2), microphone(3)]).isEmpty, "a second resync finds nothing new")
        // Later events go on from the resynced state: card 3's own remove is told once.
        #expect(tracker.apply(action: "remove", devnode: "/dev/snd/pcmC3D0c", probed: [microphone(2)]).map(\.kind) == [.remove])
    }
}
