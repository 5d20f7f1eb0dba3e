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
        // Before any thread exists, so every thread inherits the mask and SIGTERM/SIGINT
        // arrive only through the signalfd the event loop polls.
        // An inherited SIG_IGN (nohup, some supervisors) would discard the signal before
        // the signalfd sees it, so the dispositions are reset first.
        var signals = sigset_t()
        sigemptyset(&signals)
        for number in [SIGTERM, SIGINT, SIGHUP] {
            signal(number, SIG_DFL)
            sigaddset(&signals, number)
        }
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)

        let options: DaemonOptions
        switch Result(catching: { () throws(DaemonOptions.UsageError) in
            try DaemonOptions.parse(arguments, environment: environment)
        }) {
        case .failure(let error):
            writeStderr("devaccessd: \(error.message)\nSee 'devaccessd --help' for usage.\n")
            return 64
        case .success((_, .help)):
            writeStdout(DaemonOptions.help + "\n")
            return 0
        case .success((_, .version)):
            writeStdout("devaccessd \(version)\n")
            return 0
        case .success((let parsed, .serve)):
            options = parsed
        }

        let signalDescriptor = signalfd(-1, &signals, CInt(SFD_CLOEXEC) | CInt(SFD_NONBLOCK))

        let log = BrokerLog(target: options.logTarget ?? BrokerLog.detectTarget(journalStream: options.journalStream),
                            minimum: options.logLevel)
        guard signalDescriptor >= 0 else {
            log.error("cannot create a signalfd", ["error": SystemCallError.current("signalfd").description])
            return 1
        }
        if getuid() != 0 {
            log.warning("not running as root: program paths of other users' processes cannot be read, "
                        + "and no ACL can be changed", ["uid": String(getuid())])
        }
        raiseDescriptorLimit(log)
        // glibc gives each thread that allocates its own malloc arena (up to 8 per core);
        // two keep memory flat under load at no measurable cost for this workload.
        _ = mallopt(M_ARENA_MAX, 2)

        // The one-writer rule: while devaccessd runs, nothing else writes the ledger or edits
        // ACLs. An `--offline` repair still running gets a few seconds to finish.
        let engineLock: EngineLock
        do {
            try Ledger.prepareStateDirectory(options.stateDirectory)
        } catch {
            log.error("cannot use the state directory", ["error": error.description, "state_dir": options.stateDirectory])
            notify("STATUS=\(error.description)")
            return 1
        }
        do {
            engineLock = try EngineLock(stateDirectory: options.stateDirectory, wait: .seconds(10))
        } catch {
            log.error("cannot take the engine lock", ["error": "\(error)", "state_dir": options.stateDirectory])
            notify("STATUS=cannot take the engine lock in \(options.stateDirectory)")
            return 1
        }
        defer { withExtendedLifetime(engineLock) {} }

        let ledger: Ledger
        do {
            ledger = try Ledger(stateDirectory: options.stateDirectory, busyTimeout: Ledger.writerBusyTimeout)
        } catch {
            log.error("cannot open the ledger", ["error": error.description, "state_dir": options.stateDirectory])
            notify("STATUS=cannot open the ledger in \(options.stateDirectory)")
            return 1
        }

        // A policy that does not parse is refused at start: serving with no policy, or with
        // the built-in one, would grant or ask where the administrator wrote otherwise.
        let policy: Policy
        switch PolicyReading.read(directory: options.configDirectory) {
        case .loaded(let loaded): policy = loaded
        case .unreadable(let problem):
            log.error("refusing to start: the policy does not parse; fix it ('devaccess policy check "
                      + options.configDirectory + "' says where)", ["error": problem])
            notify("STATUS=the policy does not parse: \(problem)")
            return 1
        }

        let devices = deviceSetup(options, log: log)
        // One keeper for requests and the engine: both apply the same policy, last good kept.
        let policies = PolicyKeeper(directory: options.configDirectory, log: log, initial: policy,
                                    keeps: options.requestSettings.keepsStatusInputs,
                                    failWatchesWith: options.requestSettings.testFailWatches)
        // Made before the service, which hands its decisions to it (`perform`), so they
        // and hotplug/expiry runs share one queue; started once the socket is bound.
        let live: LiveEnforcer
        switch makeLiveEnforcer(ledger: ledger, devices: devices, policies: policies, options: options, log: log) {
        case .success(let made): live = made
        case .failure(let error):
            // Without it granted ACL entries would never expire, and hotplug and periodic
            // enforcement would not run: serving so would grant longer than decided.
            log.error("refusing to start: the enforcement worker cannot be created (no expiry, hotplug or periodic "
                      + "enforcement without it); free file descriptors or memory and start again",
                      ["error": error.description])
            notify("STATUS=the enforcement worker cannot be created: \(error.description)")
            return 1
        }
        var settings = options.requestSettings
        settings.maxOpenPromptsPerUser = options.maxPromptsPerUser
        settings.maxWaitingPerUser = options.maxWaitingPerUser
        settings.maxChangesPerMinute = options.maxChangesPerMinute
        // devaccessd is gpsd's client for every location reader; it connects on the first request.
        let location = options.servesLocation
            ? GpsdLocationSource(watcher: GpsdWatcher(endpoint: options.probe.gpsd), log: log) : nil
        let service = BrokerService(probe: FreshProbe(probe: devices.probe),
                                    rules: AccessRules(adminGroup: options.adminGroup), ledger: ledger,
                                    configDirectory: options.configDirectory, log: log, settings: settings,
                                    enforcement: live, policy: policy, policies: policies, location: location)
        let server: BrokerServer
        do {
            server = try BrokerServer(socketPath: options.socketPath, handler: service, log: log, limits: options.limits)
        } catch {
            log.error("cannot listen", ["error": error.description])
            notify("STATUS=\(error.description)")
            return 1
        }
        log.info("listening", ["socket": options.socketPath, "state_dir": options.stateDirectory,
                               "config_dir": options.configDirectory,
                               "admin_group": options.adminGroup, "version": version, "pid": String(getpid())])
        // After the bind (which refuses when another broker serves, so two daemons never
        // enforce at once) and before READY=1: the start-up reconcile has run when systemd
        // hears we are ready. Clients connecting meanwhile wait in the listen backlog.
        live.start()
        var endpointLimits = GpsdCompatibleServer.Limits()
        endpointLimits.recheckInterval = options.locationRecheck
        let gpsdEndpoint = options.locationPort.flatMap { service.gpsdEndpoint(port: $0, limits: endpointLimits) }
        // A revoke, an expiry, a switch or a policy edit ends a connection at once.
        let endpointCommits = gpsdEndpoint.map { endpoint in ledger.commits.observe { endpoint.recheckGrants() } }
        if let gpsdEndpoint {
            policies.observeReloads { gpsdEndpoint.recheckGrants() }
            gpsdEndpoint.start()
            log.info("gpsd endpoint listening", ["addresses": gpsdEndpoint.addresses.map(\.description)
                .joined(separator: " ")])
        }
        notify("READY=1\nSTATUS=listening on \(options.socketPath)\nMAINPID=\(getpid())")
        server.run(signalDescriptor: signalDescriptor) {
            notify("STOPPING=1\nSTATUS=shutting down")
        }
        service.recordAllOpensLeftOut()
        endpointCommits.map { ledger.commits.cancel($0) }
        gpsdEndpoint?.stop()
        location?.stop()
        live.stop()
        log.info("stopped")
        return 0
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
