import Glibc
import CSystemd
import FoundationEssentials
import DevAccessCore
import DevAccessHardware
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// devaccessd's shell: options, signals, logging, ledger, socket, readiness, shutdown.
/// `main` returns the exit status: 0 after a clean stop, 1 when it cannot start,
/// 64 for a bad command line.
public enum Daemon {
    public static let version = "0.1.0"

    /// `environment`: read once by devaccessd's main (docs/environment.md).
    public static func main(_ arguments: [String], environment: ProcessEnvironment) -> Int32 {
        var signals = blockTerminationSignals()
        let options: DaemonOptions
        switch command(arguments, environment: environment) {
        case .exit(let status): return status
        case .serve(let parsed): options = parsed
        }
        let log = BrokerLog(target: options.logTarget ?? BrokerLog.detectTarget(journalStream: options.journalStream),
                            minimum: options.logLevel)
        let signalDescriptor = signalfd(-1, &signals, CInt(SFD_CLOEXEC) | CInt(SFD_NONBLOCK))
        guard signalDescriptor >= 0 else {
            log.error("cannot create a signalfd", ["error": SystemCallError.current("signalfd").description])
            return 1
        }
        prepareProcess(log)
        do {
            let state = try openState(options)
            defer { withExtendedLifetime(state.engineLock) {} }
            let running = try startServing(options, state: state, log: log)
            running.server.run(signalDescriptor: signalDescriptor) {
                notify("STOPPING=1\nSTATUS=shutting down")
            }
            running.stop()
            log.info("stopped")
            return 0
        } catch {
            log.error(error.message, error.fields)
            notify("STATUS=\(error.status)")
            return 1
        }
    }

    /// Why devaccessd does not start: what the log says (with its fields) and what systemd's
    /// STATUS= says.
    struct StartFailure: Error {
        var message: String
        var fields: KeyValuePairs<String, String>
        var status: String
    }

    /// What the command line asks: to serve with these options, or an exit status (help,
    /// version, a usage error) once its text is written.
    private enum Command {
        case serve(DaemonOptions)
        case exit(Int32)
    }

    private static func command(_ arguments: [String], environment: ProcessEnvironment) -> Command {
        switch Result(catching: { () throws(DaemonOptions.UsageError) in
            try DaemonOptions.parse(arguments, environment: environment)
        }) {
        case .failure(let error):
            writeStderr("devaccessd: \(error.message)\nSee 'devaccessd --help' for usage.\n")
            return .exit(64)
        case .success((_, .help)):
            writeStdout(DaemonOptions.help + "\n")
            return .exit(0)
        case .success((_, .version)):
            writeStdout("devaccessd \(version)\n")
            return .exit(0)
        case .success((let parsed, .serve)):
            return .serve(parsed)
        }
    }

    /// Before any thread exists, so every thread inherits the mask and SIGTERM/SIGINT/SIGHUP
    /// arrive only through the signalfd the event loop polls. An inherited SIG_IGN (nohup,
    /// some supervisors) would discard the signal before the signalfd sees it, so the
    /// dispositions are reset first. Returns the blocked set, for the signalfd.
    private static func blockTerminationSignals() -> sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        for number in [SIGTERM, SIGINT, SIGHUP] {
            signal(number, SIG_DFL)
            sigaddset(&signals, number)
        }
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)
        return signals
    }

    private static func prepareProcess(_ log: BrokerLog) {
        if getuid() != 0 {
            log.warning("not running as root: program paths of other users' processes cannot be read, "
                        + "and no ACL can be changed", ["uid": String(getuid())])
        }
        raiseDescriptorLimit(log)
        // glibc gives each thread that allocates its own malloc arena (up to 8 per core);
        // two keep memory flat under load at no measurable cost for this workload.
        _ = mallopt(M_ARENA_MAX, 2)
    }

    /// The state devaccessd serves from: the engine lock, the ledger, and a policy that parses.
    struct State {
        var engineLock: EngineLock
        var ledger: Ledger
        var policy: Policy
    }

    /// The one-writer rule: while devaccessd runs, nothing else writes the ledger or edits
    /// ACLs (an `--offline` repair still running gets a few seconds to finish). A policy that
    /// does not parse is refused at start: serving with no policy, or with the built-in one,
    /// would grant or ask where the administrator wrote otherwise.
    private static func openState(_ options: DaemonOptions) throws(StartFailure) -> State {
        let directory = options.stateDirectory
        do {
            try Ledger.prepareStateDirectory(directory)
        } catch {
            throw StartFailure(message: "cannot use the state directory",
                               fields: ["error": error.description, "state_dir": directory], status: error.description)
        }
        let engineLock = try takeEngineLock(directory)
        let ledger: Ledger
        do {
            ledger = try Ledger(stateDirectory: directory, busyTimeout: Ledger.writerBusyTimeout)
        } catch {
            throw StartFailure(message: "cannot open the ledger", fields: ["error": error.description, "state_dir": directory],
                               status: "cannot open the ledger in \(directory)")
        }
        switch PolicyReading.read(directory: options.configDirectory) {
        case .loaded(let policy):
            return State(engineLock: engineLock, ledger: ledger, policy: policy)
        case .unreadable(let problem):
            throw StartFailure(message: "refusing to start: the policy does not parse; fix it ('devaccess policy check "
                                   + options.configDirectory + "' says where)",
                               fields: ["error": problem], status: "the policy does not parse: \(problem)")
        }
    }

    /// A running devaccessd is named at once (it holds the lock until it exits: waiting
    /// is pointless); an offline command gets 10 s to finish.
    private static func takeEngineLock(_ directory: String) throws(StartFailure) -> EngineLock {
        do {
            return try EngineLock(stateDirectory: directory, holder: .daemon)
        } catch .held {
            try refuseIfADaemonRuns(directory)
        } catch {
            throw cannotTakeEngineLock(error, directory)
        }
        do {
            return try EngineLock(stateDirectory: directory, holder: .daemon, wait: .seconds(10))
        } catch {
            try refuseIfADaemonRuns(directory)
            throw cannotTakeEngineLock(error, directory)
        }
    }

    private static func refuseIfADaemonRuns(_ directory: String) throws(StartFailure) {
        guard let pid = EngineLock.daemonHolding(stateDirectory: directory) else { return }
        throw StartFailure(message: "devaccessd is already running (pid \(pid)) on this state directory; not starting "
                               + "another (to restart it, \(DaemonStart.stopAdvice()) first)",
                           fields: ["pid": String(pid), "state_dir": directory],
                           status: "devaccessd is already running (pid \(pid)) on \(directory)")
    }

    private static func cannotTakeEngineLock(_ error: EngineLock.Failure, _ directory: String) -> StartFailure {
        StartFailure(message: "cannot take the engine lock", fields: ["error": "\(error)", "state_dir": directory],
                     status: "cannot take the engine lock in \(directory)")
    }

    /// What runs while devaccessd serves, and how it stops.
    struct Running {
        var server: BrokerServer
        var service: BrokerService
        var live: LiveEnforcer
        var location: GpsdLocationSource?
        var gpsdEndpoint: GpsdCompatibleServer?
        var stopEndpointWatch: () -> Void

        func stop() {
            service.recordAllOpensLeftOut()
            stopEndpointWatch()
            gpsdEndpoint?.stop()
            location?.stop()
            live.stop()
        }
    }

    /// The service and its engine worker, the socket, then the start-up reconcile and the gpsd
    /// endpoint; READY=1 once all of it runs.
    private static func startServing(_ options: DaemonOptions, state: State, log: BrokerLog) throws(StartFailure)
        -> Running {
        let devices = deviceSetup(options, log: log)
        // One keeper for requests and the engine: both apply the same policy, last good kept.
        let policies = PolicyKeeper(directory: options.configDirectory, log: log, initial: state.policy,
                                    keeps: options.requestSettings.keepsStatusInputs,
                                    failWatchesWith: options.requestSettings.testFailWatches)
        // Made before the service, which hands its decisions to it (`perform`), so they
        // and hotplug/expiry runs share one queue; started once the socket is bound.
        let live = try liveEnforcer(ledger: state.ledger, devices: devices, policies: policies, options: options, log: log)
        // devaccessd is gpsd's client for every location reader; it connects on the first request.
        let location = options.servesLocation
            ? GpsdLocationSource(watcher: GpsdWatcher(endpoint: options.probe.gpsd), log: log) : nil
        let service = BrokerService(probe: FreshProbe(probe: watchedProbe(devices, location: location, options)),
                                    adminGroup: options.adminGroup, ledger: state.ledger,
                                    configDirectory: options.configDirectory, log: log, settings: settings(options),
                                    enforcement: live, policy: state.policy, policies: policies, location: location)
        let server: BrokerServer
        do {
            server = try BrokerServer(socketPath: options.socketPath, handler: service, log: log, limits: options.limits)
        } catch {
            throw StartFailure(message: "cannot listen", fields: ["error": error.description], status: error.description)
        }
        log.info("listening", ["socket": options.socketPath, "state_dir": options.stateDirectory,
                               "config_dir": options.configDirectory,
                               "admin_group": options.adminGroup, "version": version, "pid": String(getpid())])
        // After the bind (which refuses when another broker serves, so two daemons never
        // enforce at once) and before READY=1: the start-up reconcile has run when systemd
        // hears we are ready. Clients connecting meanwhile wait in the listen backlog.
        live.start()
        let (endpoint, stopWatch) = startGpsdEndpoint(options, service: service, ledger: state.ledger,
                                                      policies: policies, log: log)
        notify("READY=1\nSTATUS=listening on \(options.socketPath)\nMAINPID=\(getpid())")
        return Running(server: server, service: service, live: live, location: location, gpsdEndpoint: endpoint,
                       stopEndpointWatch: stopWatch)
    }

    private static func settings(_ options: DaemonOptions) -> RequestSettings {
        var settings = options.requestSettings
        settings.maxOpenPromptsPerUser = options.maxPromptsPerUser
        settings.maxWaitingPerUser = options.maxWaitingPerUser
        settings.maxChangesPerMinute = options.maxChangesPerMinute
        return settings
    }

    /// Without the engine's worker granted ACL entries would never expire, and hotplug and
    /// periodic enforcement would not run: serving so would grant longer than decided.
    private static func liveEnforcer(ledger: Ledger, devices: DeviceSetup, policies: PolicyKeeper,
                                     options: DaemonOptions, log: BrokerLog) throws(StartFailure) -> LiveEnforcer {
        switch makeLiveEnforcer(ledger: ledger, devices: devices, policies: policies, options: options, log: log) {
        case .success(let made):
            return made
        case .failure(let error):
            throw StartFailure(message: "refusing to start: the enforcement worker cannot be created (no expiry, hotplug "
                                   + "or periodic enforcement without it); free file descriptors or memory and start again",
                               fields: ["error": error.description],
                               status: "the enforcement worker cannot be created: \(error.description)")
        }
    }

    /// The gpsd-compatible endpoint, when a port is given: a revoke, an expiry, a switch or a
    /// policy edit ends a connection at once. Returns it and what stops its ledger watch.
    private static func startGpsdEndpoint(_ options: DaemonOptions, service: BrokerService, ledger: Ledger,
                                          policies: PolicyKeeper, log: BrokerLog)
        -> (GpsdCompatibleServer?, () -> Void) {
        var limits = GpsdCompatibleServer.Limits()
        limits.recheckInterval = options.locationRecheck
        guard let endpoint = options.locationPort.flatMap({ service.gpsdEndpoint(port: $0, limits: limits) }) else {
            return (nil, {})
        }
        let commits = ledger.commits.observe { endpoint.recheckGrants() }
        policies.observeReloads { endpoint.recheckGrants() }
        endpoint.start()
        log.info("gpsd endpoint listening", ["addresses": endpoint.addresses.map(\.description).joined(separator: " ")])
        return (endpoint, { ledger.commits.cancel(commits) })
    }

    /// The engine's worker (Enforcement/LiveEnforcer.swift): once started, the start-up
    /// reconcile, then hotplug, expiry timer and periodic runs until `stop()`. A failure
    /// (its event descriptor cannot be made) stops the start.
    private static func makeLiveEnforcer(ledger: Ledger, devices: DeviceSetup, policies: PolicyKeeper,
                                         options: DaemonOptions, log: BrokerLog) -> Result<LiveEnforcer, Errno> {
        let uid = getuid()
        // Users' identities (name, groups) kept while /etc says passwd, group and
        // nsswitch.conf are as they were (StatusInputsCache's rules: a lifetime when NSS has
        // sources no event covers or /etc is not local, nothing kept through other names).
        let identities = StatusInputsCache(policyDirectory: options.configDirectory, ledgerDirectory: nil, log: log,
                                           failWatchesWith: options.requestSettings.testFailWatches)
        let keeps = options.requestSettings.keepsStatusInputs
        let lookUp: @Sendable (UInt32) -> UserIdentity? = { uid in
            keeps ? identities.identity(uid: uid) : try? UserDatabase.identity(uid: uid)
        }
        var enforcer = Enforcer(ledger: ledger, devices: devices.enforcement,
                                actor: Principal(uid: uid, name: UserDatabase.userName(uid) ?? String(uid)),
                                identities: lookUp,
                                policy: { policies.current() })
        enforcer.testCrashAt = options.requestSettings.testCrashAt
        let live: LiveEnforcer
        do throws(Errno) {
            if let failure = options.requestSettings.testFailEnforcer { throw Errno(rawValue: failure) }
            live = try LiveEnforcer(enforcer: enforcer, log: log, options: LiveEnforcer.Options(
                reconcileInterval: options.reconcileInterval,
                udevSubsystems: devices.declared ? [] : LiveEnforcer.subsystems,
                ledgerDirectory: options.stateDirectory, nodeDirectories: devices.nodeDirectories,
                policyDirectory: options.configDirectory, reloadPolicy: { policies.reload(trigger: $0) }))
        } catch {
            return .failure(error)
        }
        // A second hard link to /etc/passwd or /etc/group made after an identity was kept
        // makes no event on /etc: the periodic reconcile reads every identity again.
        live.observe { causes in
            if causes.split(separator: ",").contains("periodic") { identities.invalidate([.identities]) }
        }
        return .success(live)
    }

    /// Status, request and run learn location's devices from the daemon's one gpsd watcher
    /// (the one `location` serves from), not from a connection of their own.
    private static func watchedProbe(_ devices: DeviceSetup, location: GpsdLocationSource?,
                                     _ options: DaemonOptions) -> FreshProbe.Probe {
        guard let location, !devices.declared else { return devices.probe }
        let reports = WatchedLocationReports(source: location,
                                             gate: GpsdClient(endpoint: options.probe.gpsd,
                                                              timeout: options.probe.gpsdTimeout),
                                             firstAnswer: GpsdWatcher.defaultHandshakeTimeout)
        let probe = devices.probe
        return { permission in permission == .location ? reports.report() : probe(permission) }
    }

    /// Where devices come from, for status answers and for the engine alike.
    struct DeviceSetup {
        var probe: FreshProbe.Probe
        var enforcement: any DeviceSource
        /// True for the DEBUG-only declaration file: no udev events exist for those nodes.
        var declared = false
        /// Directories of declared nodes -> their names, watched with inotify instead.
        var nodeDirectories: [String: Set<String>] = [:]
    }

    /// The real adapters; in DEBUG builds only, `DEVACCESS_TEST_DEVICES` names a file of
    /// declared devices (as for the devaccess CLI) so tests can run the daemon against
    /// nodes they made with mknod. Release builds ignore it.
    private static func deviceSetup(_ options: DaemonOptions, log: BrokerLog) -> DeviceSetup {
        #if DEBUG
        if let path = options.testDevices {
            do {
                let declared = try DeclaredDeviceSource(contentsOf: path)
                log.warning("TEST ONLY: devices come from a declaration file, not udev and gpsd", ["file": path])
                var directories: [String: Set<String>] = [:]
                for node in declared.devices.flatMap(\.nodes) {
                    let url = URL(fileURLWithPath: node.path)
                    directories[url.deletingLastPathComponent().path, default: []].insert(url.lastPathComponent)
                }
                return DeviceSetup(probe: { declared.report(for: $0) }, enforcement: declared, declared: true,
                                   nodeDirectories: directories)
            } catch {
                log.error("ignoring DEVACCESS_TEST_DEVICES", ["error": error.description])
            }
        }
        #endif
        return DeviceSetup(probe: FreshProbe.hardware(options.probe),
                           enforcement: MachineDeviceSource(probeOptions: options.probe))
    }

    /// sd_notify(3) when started by systemd (NOTIFY_SOCKET set); nothing otherwise.
    static func notify(_ state: String) {
        _ = sd_notify(0, state)
    }

    /// Every connection costs a descriptor; lift the soft limit towards the hard one.
    private static func raiseDescriptorLimit(_ log: BrokerLog) {
        var limit = rlimit()
        guard getrlimit(CInt(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        let wanted = min(limit.rlim_max, 65536)
        guard limit.rlim_cur < wanted else { return }
        limit.rlim_cur = wanted
        if setrlimit(CInt(RLIMIT_NOFILE.rawValue), &limit) != 0 {
            log.warning("cannot raise the descriptor limit", ["error": SystemCallError.current("setrlimit").description])
        }
    }

    private static func writeStdout(_ text: String) { write(STDOUT_FILENO, text) }
    private static func writeStderr(_ text: String) { write(STDERR_FILENO, text) }

    private static func write(_ fd: CInt, _ text: String) {
        FileDescriptor.writeAll(fd, text)
    }
}
