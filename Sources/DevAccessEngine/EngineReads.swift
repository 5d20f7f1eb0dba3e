import DevAccessCore
import DevAccessEnforcement
import DevAccessHardware
import DevAccessInterface
import DevAccessLedger
import DevAccessSystem

/// The engine's reads that need no devaccessd, in the caller's process: the devices (udev,
/// gpsd, or in DEBUG builds a declaration file), a status from the ledger (read-only) and the
/// policy, who opens the capture nodes without devaccess. `status`, `explain`, `check`,
/// `devices`, `who` and `doctor` keep working without devaccessd through these; nothing here
/// writes, and nothing decides who may read what (the caller checks that first).
public struct EngineReads: Sendable {
    /// Where the reads look, as the command line gave it.
    public struct Settings: Sendable {
        /// nil: `$DEVACCESS_STATE_DIR` or /var/lib/devaccess.
        public var stateDirectory: String?
        /// nil: `$DEVACCESS_CONFIG_DIR` or /etc/devaccess (`PolicyFiles`).
        public var policyDirectory: String?
        /// `HOST:PORT` of gpsd; nil: `$DEVACCESS_GPSD` or the default.
        public var gpsd: String?
        public var gpsdTimeout: Duration?

        public init(stateDirectory: String? = nil, policyDirectory: String? = nil, gpsd: String? = nil,
                    gpsdTimeout: Duration? = nil) {
            self.stateDirectory = stateDirectory
            self.policyDirectory = policyDirectory
            self.gpsd = gpsd
            self.gpsdTimeout = gpsdTimeout
        }
    }

    public let stateDirectory: String
    let policyDirectory: String
    let settings: Settings
    let environment: ProcessEnvironment

    /// Nothing is parsed or read yet: a command that needs no devices never fails on them.
    public init(_ settings: Settings, environment: ProcessEnvironment) {
        stateDirectory = settings.stateDirectory ?? Ledger.stateDirectory(environment: environment)
        policyDirectory = settings.policyDirectory ?? PolicyFiles.directory(environment)
        self.settings = settings
        self.environment = environment
    }

    /// Where gpsd is asked, and how long; `gpsd` that is no endpoint is `badArgument`.
    public func probeOptions() throws(InterfaceError) -> ProbeOptions {
        var probe = ProbeOptions()
        do {
            // --gpsd wins; an unset or empty DEVACCESS_GPSD means the default.
            probe.gpsd = try settings.gpsd.map { try GpsdEndpoint(parsing: $0) } ?? GpsdEndpoint.fromEnvironment(environment)
        } catch {
            throw .badArgument("\(error)")
        }
        if let timeout = settings.gpsdTimeout { probe.gpsdTimeout = timeout }
        return probe
    }

    /// TEST-ONLY: in DEBUG builds `DEVACCESS_TEST_DEVICES=/path/devices.json` replaces udev
    /// and gpsd with declared devices (nodes the tests made with mknod), so the tests can run
    /// the real binary against real nodes. Release builds ignore the variable.
    private func declaredDevices() throws(InterfaceError) -> DeclaredDeviceSource? {
        #if DEBUG
        guard let path = environment[ProcessEnvironment.Name.testDevices] else { return nil }
        do {
            return try DeclaredDeviceSource(contentsOf: path)
        } catch {
            throw .failed(error.description)
        }
        #else
        return nil
        #endif
    }

    /// The device source the enforcement engine uses (`--offline`).
    public func deviceSource() throws(InterfaceError) -> any DeviceSource {
        if let declared = try declaredDevices() { return declared }
        return MachineDeviceSource(probeOptions: try probeOptions())
    }

    /// Reports for `permissions`; location runs beside the udev probes (see `MachineProbe`).
    public func devices(_ permissions: [Permission]) async throws(InterfaceError) -> [AdapterReport] {
        if let declared = try declaredDevices() { return permissions.map { declared.report(for: $0) } }
        let options = try probeOptions()
        return await MachineProbe.probe(permissions, options: options)
    }

    /// `user`'s statuses from the devices, the ledger and the policy; nil when the ledger is
    /// private here (root's alone): devaccessd answers for it, or `status(_:for:decisionsUnknown:)`.
    public func status(_ permissions: [Permission], for user: UserIdentity) async throws(InterfaceError)
        -> StatusReading?
    {
        _ = try probeOptions()  // a wrong --gpsd is a usage error even where devaccessd answers
        let ledger = LedgerStatus.read(stateDirectory: stateDirectory, uid: user.uid)
        if ledger.isPrivate { return nil }
        return try await status(permissions, for: user, ledger: ledger)
    }

    /// The statuses from the devices and the policy alone, the decisions unknown (`why`).
    public func status(_ permissions: [Permission], for user: UserIdentity, decisionsUnknown why: String)
        async throws(InterfaceError) -> StatusReading
    {
        try await status(permissions, for: user, ledger: .unknown(why: why))
    }

    private func status(_ permissions: [Permission], for user: UserIdentity, ledger: LedgerReading)
        async throws(InterfaceError) -> StatusReading
    {
        let reports = try await devices(permissions)
        let policy = PolicyReading.read(directory: policyDirectory)
        var reading = StatusReading(user: user, statuses: reports.map {
            LedgerStatus.evaluate($0, for: user, ledger: ledger, policy: policy)
        })
        reading.reports = reports
        reading.ledger = ledger
        if case .unknown(let why) = ledger { reading.decisionsUnknown = why }
        return reading
    }

    /// Who opens the capture nodes without devaccess, when camera or microphone is asked
    /// about: from the reports probed for `reading` (or a probe of its own), the ledger's
    /// records when `reading` read them (without a reading: the ledger here, when readable),
    /// and udev's tags.
    public func gate(_ permissions: [Permission], reading: StatusReading?) async throws(InterfaceError) -> GateReport? {
        let gated = permissions.filter { $0 == .camera || $0 == .microphone }
        guard !gated.isEmpty else { return nil }
        let reports = if let probed = reading?.reports {
            probed.filter { gated.contains($0.permission) }
        } else {
            try await devices(gated)
        }
        var records: [ACLEntryRecord]?
        let ledger = reading == nil ? LedgerStatus.read(stateDirectory: stateDirectory) : reading?.ledger
        switch ledger {
        case .loaded(let snapshot)?: records = snapshot.records
        case .absent?: records = []  // nothing decided yet: devaccess made no entry
        default: records = nil
        }
        // Declared test nodes are not udev's: no tags to read for them.
        let udev = try declaredDevices() == nil ? try? Udev() : nil
        return GateAnalyzer.analyze(reports, records: records,
                                    tags: { major, minor in udev?.characterDevice(major: major, minor: minor)?.currentTags })
    }
}

/// A status computed by `EngineReads`, or given by devaccessd (`init(user:statuses:)`).
public struct StatusReading: Sendable {
    public var user: UserIdentity
    public var statuses: [PermissionStatus]
    /// Why the ledger's decisions are not in the statuses (devaccessd not reachable), if so.
    public var decisionsUnknown: String?
    /// The devices probed here (nil when devaccessd answered the whole status).
    var reports: [AdapterReport]?
    var ledger: LedgerReading?

    public init(user: UserIdentity, statuses: [PermissionStatus]) {
        self.user = user
        self.statuses = statuses
    }
}
