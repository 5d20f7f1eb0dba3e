/// What `devaccess monitor` says about one permission as its statuses arrive: which devices
/// are there (from udev events through `HotplugTracker`, or from each of devaccessd's status
/// updates, `update`) and the status before and after each device's change.
///
/// With events, the status comes from a reader, but that reading is of the machine as it is when it is taken: after a batch of
/// events (`rmmod` of a driver with two cameras), the first event's reading already shows the
/// second camera gone. So each event's status is the reading narrowed to the devices the
/// events so far have brought: unavailable with none; what the decisions impose (restricted,
/// denied) while there are devices; otherwise authorized, limited or notDetermined from the
/// devices usable as last read. When the events' devices are exactly the reading's, it is the
/// reading's status, unchanged.
public struct HotplugStatusModel: Sendable {
    /// One device added, removed or changed by an event, and the status around that event.
    public struct Step: Sendable, Equatable {
        public var change: HotplugTracker.Change
        public var previousStatus: AuthorizationStatus
        public var status: AuthorizationStatus
    }

    public private(set) var tracker: HotplugTracker
    /// The latest reading.
    public private(set) var reading: PermissionStatus
    /// The status over the devices the events have brought so far.
    public private(set) var status: AuthorizationStatus
    /// What the decisions impose while there are devices (restricted, denied, or unavailable
    /// for a reason of the permission's own), nil when the kernel's access decides; from the
    /// latest reading that listed devices (one with none cannot tell).
    private var imposed: AuthorizationStatus?
    /// Each device's status as last read, by id: for a device the latest reading no longer
    /// lists (gone already, its remove event still queued).
    private var lastRead: [String: DeviceStatus] = [:]

    /// Starts from a reading: its devices are the ones known, its status the status.
    public init(snapshot: PermissionStatus) {
        tracker = HotplugTracker(initial: snapshot.devices.map(\.device))
        reading = snapshot
        status = snapshot.status
        take(snapshot)
    }

    /// The device as last read (its nodes' access for the user, usable or not).
    public func lastRead(_ id: String) -> DeviceStatus? { lastRead[id] }

    /// Takes a new reading, as taken after the events that are to be applied next.
    public mutating func read(_ fresh: PermissionStatus) {
        take(fresh)
        status = narrowed()
    }

    /// One udev event (its ACTION and DEVNAME): the devices it adds, removes or changes, each
    /// with the status before and after it. An event of no device's capture node adds and
    /// removes nothing.
    public mutating func apply(action: String, devnode: String?) -> [Step] {
        let before = status
        let changes = tracker.apply(action: action, devnode: devnode, probed: reading.devices.map(\.device))
        status = narrowed()
        return changes.map { Step(change: $0, previousStatus: before, status: status) }
    }

    /// A reading that is the whole truth (devaccessd's status updates: no event names the
    /// devices): the devices it adds, removes or changes against those known, one step each,
    /// its status narrowed after each as for events, so two cameras gone in one update give
    /// `X -> X` then `X -> unavailable`. After the last step the status is the reading's.
    public mutating func update(_ fresh: PermissionStatus) -> [Step] {
        var target = tracker
        let changes = target.resync(probed: fresh.devices.map(\.device))
        take(fresh)
        var steps: [Step] = []
        for change in changes {
            let before = status
            tracker.take(change)
            status = narrowed()
            steps.append(Step(change: change, previousStatus: before, status: status))
        }
        status = narrowed()
        return steps
    }

    private mutating func take(_ fresh: PermissionStatus) {
        reading = fresh
        if !fresh.devices.isEmpty {
            switch fresh.status {
            case .restricted, .denied, .unavailable: imposed = fresh.status
            case .authorized, .limited, .notDetermined: imposed = nil
            }
        }
        for device in fresh.devices { lastRead[device.device.id] = device }
        let kept = Set(tracker.known.map(\.id)).union(fresh.devices.map(\.device.id))
        lastRead = lastRead.filter { kept.contains($0.key) }
    }

    private func narrowed() -> AuthorizationStatus {
        let known = tracker.known
        if known.isEmpty { return .unavailable }
        if Set(known.map(\.id)) == Set(reading.devices.map(\.device.id)) { return reading.status }
        if let imposed { return imposed }
        let usable = known.filter { lastRead[$0.id]?.usable == true }.count
        if usable == known.count { return .authorized }
        return usable > 0 ? .limited : .notDetermined
    }
}
