/// What `devaccess monitor` says about one permission as udev events arrive: which devices
/// are there (from the events themselves, through `HotplugTracker`) and the status before and
/// after each event.
///
/// The status comes from a reader (devaccessd, or the ledger and policy read here, as for
/// `status`), but that reading is of the machine as it is when it is taken: after a batch of
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
