import DevAccessCore
import DevAccessEnforcement
import DevAccessHardware
import DevAccessInterface
import DevAccessLedger
import DevAccessSystem
import Synchronization

/// The engine's reads that need no devaccessd, in the caller's process: the devices (udev,
/// gpsd, or in DEBUG builds a declaration file), a status from the ledger (read-only) and the
/// policy, who opens the capture nodes without devaccess. `status`, `explain`, `check`,
/// `devices`, `who` and `doctor` keep working without devaccessd through these; nothing here
/// writes, and nothing decides who may read what (`EngineService` judges that first).
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
    /// Shared by the copies of these reads (one command's).
    let lastStatus = LastStatusRead()

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

    /// `uid`'s decisions as the ledger here gives them (read-only); nil when the ledger is
    /// root's alone here (devaccessd reads it).
    func ledger(for uid: UInt32) -> LedgerReading? {
        let reading = LedgerStatus.read(stateDirectory: stateDirectory, uid: uid)
        return reading.isPrivate ? nil : reading
    }

    /// The policy as the files say now.
    func policy() -> PolicyReading {
        PolicyReading.read(directory: policyDirectory)
    }

    /// What a status is computed from, read here: the devices of `permissions`, `ledger`
    /// (as `ledger(for:)` read it, or the decisions unknown) and the policy. Kept for `gate`.
    func statusInputs(_ permissions: [Permission], ledger: LedgerReading) async throws(InterfaceError) -> StatusInputs {
        let inputs = StatusInputs(reports: try await devices(permissions), ledger: ledger, policy: policy())
        lastStatus.keep(inputs)
        return inputs
    }

    /// Who opens the capture nodes without devaccess, when camera or microphone is asked
    /// about: from the reports a status here probed (else a probe of its own), the ledger's
    /// records when that status read them (without one: the ledger here, when readable),
    /// and udev's tags.
    public func gate(_ permissions: [Permission]) async throws(InterfaceError) -> GateReport? {
        let gated = permissions.filter { $0 == .camera || $0 == .microphone }
        guard !gated.isEmpty else { return nil }
        let read = lastStatus.kept
        let reports = if let probed = read?.reports {
            probed.filter { gated.contains($0.permission) }
        } else {
            try await devices(gated)
        }
        var records: [ACLEntryRecord]?
        let ledger = read == nil ? LedgerStatus.read(stateDirectory: stateDirectory) : read?.ledger
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

/// What a status is computed from: the devices' reports, the decisions as the ledger was
/// read (or why they are unknown) and the policy. devaccessd gathers its own (kept current by
/// its caches); the engine in the CLI's process reads them here (`EngineReads`).
public struct StatusInputs: Sendable {
    public var reports: [AdapterReport]
    public var ledger: LedgerReading
    public var policy: PolicyReading
    /// devaccessd's: why the policy files do not parse while `policy` is the last good one.
    public var brokenPolicy: String?

    public init(reports: [AdapterReport], ledger: LedgerReading, policy: PolicyReading) {
        self.reports = reports
        self.ledger = ledger
        self.policy = policy
    }
}

/// The inputs of the last status read in this process: `gate` reuses its probe and ledger read
/// rather than probing again.
final class LastStatusRead: Sendable {
    private let state = Mutex<StatusInputs?>(nil)

    var kept: StatusInputs? { state.withLock { $0 } }

    func keep(_ inputs: StatusInputs) {
        state.withLock { $0 = inputs }
    }
}
