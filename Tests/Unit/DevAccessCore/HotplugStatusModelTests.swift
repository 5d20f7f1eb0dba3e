import Testing
@testable import DevAccessCore

/// `devaccess monitor`'s status per event: from the events' own devices and the reading's
/// decisions, never from a reading that already shows later events of the same batch.
struct HotplugStatusModelTests {
    static func camera(_ index: Int) -> Device {
        Device(permission: .camera, id: "camera:test-\(index)", name: "camera \(index)", nodes: [
            DeviceNode(path: "/dev/video\(index)", role: "capture", required: .readWrite, state: .present(
                NodeFacts(path: "/dev/video\(index)", kind: .characterDevice, ownerUID: 0, groupGID: 44, mode: 0o660))),
        ])
    }

    static func reading(_ status: AuthorizationStatus, _ cameras: [Int], usable: Bool = true) -> PermissionStatus {
        PermissionStatus(permission: .camera, status: status,
                         devices: cameras.map { DeviceStatus(device: camera($0), nodes: [], usable: usable) },
                         reasons: [])
    }

    static func summary(_ steps: [HotplugStatusModel.Step]) -> [String] {
        steps.map { "\($0.change.kind.rawValue) \($0.change.device.id) \($0.previousStatus.rawValue)->\($0.status.rawValue)" }
    }

    /// rmmod of a driver with two cameras: both remove events are queued when the status is
    /// read, and that reading lists neither camera. The first event still leaves one camera.
    @Test func twoRemovesInOneBatchEachGetTheirOwnBeforeAndAfter() {
        var model = HotplugStatusModel(snapshot: Self.reading(.authorized, [0, 1]))
        model.read(Self.reading(.unavailable, []))
        #expect(model.status == .authorized, "nothing was removed by an event yet")
        let first = model.apply(action: "remove", devnode: "/dev/video0")
        let second = model.apply(action: "remove", devnode: "/dev/video1")
        #expect(Self.summary(first + second) == ["remove camera:test-0 authorized->authorized",
                                                 "remove camera:test-1 authorized->unavailable"])
    }

    /// devaccessd's status updates name no device (`update`): two cameras gone in one update
    /// still give each its own before and after, both back in one update too, and a decision
    /// alone is no device step, only the reading's status.
    @Test func anUpdateStepsThroughItsDeviceChangesOneByOne() {
        var model = HotplugStatusModel(snapshot: Self.reading(.denied, [0, 1]))
        #expect(Self.summary(model.update(Self.reading(.unavailable, []))) == [
            "remove camera:test-0 denied->denied", "remove camera:test-1 denied->unavailable",
        ])
        #expect(Self.summary(model.update(Self.reading(.denied, [0, 1]))) == [
            "add camera:test-0 unavailable->denied", "add camera:test-1 denied->denied",
        ])
        #expect(model.update(Self.reading(.authorized, [0, 1])).isEmpty)
        #expect(model.status == .authorized)
    }

    /// A standing denial stays denied on every event while a camera is left, whatever the
    /// nodes let the user open; with none left the camera is unavailable.
    @Test func aDenialHoldsThroughABatchOfRemovesAndAdds() {
        var model = HotplugStatusModel(snapshot: Self.reading(.denied, [0, 1]))
        model.read(Self.reading(.unavailable, []))
        let removed = model.apply(action: "remove", devnode: "/dev/video0")
            + model.apply(action: "remove", devnode: "/dev/video1")
        #expect(Self.summary(removed) == ["remove camera:test-0 denied->denied",
                                          "remove camera:test-1 denied->unavailable"])
        // Both come back in one batch: the reading lists both already.
        model.read(Self.reading(.denied, [0, 1]))
        let added = model.apply(action: "add", devnode: "/dev/video0") + model.apply(action: "add", devnode: "/dev/video1")
        #expect(Self.summary(added) == ["add camera:test-0 unavailable->denied", "add camera:test-1 denied->denied"])
    }

    /// The decisions are remembered from the last reading that listed devices: a reading with
    /// none (everything gone) cannot say restricted, and must not turn the camera that is still
    /// known (its remove queued) into authorized.
    @Test func aRestrictionIsNotForgottenWhenAReadingHasNoDevices() {
        var model = HotplugStatusModel(snapshot: Self.reading(.restricted, [0, 1], usable: true))
        model.read(Self.reading(.unavailable, []))
        let steps = model.apply(action: "remove", devnode: "/dev/video0")
        #expect(Self.summary(steps) == ["remove camera:test-0 restricted->restricted"])
    }

    /// Without a decision, a partial device set is judged by each device's usability as last
    /// read, and the reading's own status applies once the events caught up with it.
    @Test func withoutDecisionsUsabilityOfTheKnownDevicesDecides() {
        var model = HotplugStatusModel(snapshot: Self.reading(.unavailable, []))
        var fresh = Self.reading(.limited, [0, 1])
        fresh.devices[1].usable = false
        model.read(fresh)
        let steps = model.apply(action: "add", devnode: "/dev/video0") + model.apply(action: "add", devnode: "/dev/video1")
        #expect(Self.summary(steps) == ["add camera:test-0 unavailable->authorized", "add camera:test-1 authorized->limited"])
        #expect(model.lastRead("camera:test-1")?.usable == false)
    }

    /// An event of a node that is no device's capture node changes nothing, and a device the
    /// reading does not list is not added (there is nothing to say about it).
    @Test func eventsOfOtherNodesAddNothing() {
        var model = HotplugStatusModel(snapshot: Self.reading(.unavailable, []))
        model.read(Self.reading(.notDetermined, [0]))
        #expect(model.apply(action: "add", devnode: "/dev/radio0").isEmpty)
        #expect(model.apply(action: "add", devnode: "/dev/video7").isEmpty)
        #expect(model.status == .unavailable)
    }
}
