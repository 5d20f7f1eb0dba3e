import Glibc
import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import DevAccessHardware
import DevAccessLedger
import DevAccessProtocol

/// devaccessd's command line. Every option has a default that fits the systemd unit.
public struct DaemonOptions: Sendable {
    public var socketPath = BrokerProtocol.defaultSocketPath
    public var stateDirectory = Ledger.systemStateDirectory
    public var configDirectory = PolicyFiles.systemDirectory
    public var adminGroup = "devaccess-admin"
    public var probe = ProbeOptions()
    public var limits = BrokerServer.Limits()
    /// Per-user limits of consent conversations (RequestSettings).
    public var maxPromptsPerUser = RequestSettings().maxOpenPromptsPerUser
    public var maxWaitingPerUser = RequestSettings().maxWaitingPerUser
    public var maxChangesPerMinute = RequestSettings().maxChangesPerMinute
    /// Period of live enforcement's safety reconcile; nil: off (devaccessd(8), LIVE ENFORCEMENT).
    public var reconcileInterval: Duration? = .seconds(60)
    /// false: no gpsd client, no `location`, no gpsd endpoint (`--no-location`).
    public var servesLocation = true
    /// The gpsd-compatible endpoint's loopback port; nil: none (`--location-port 0`).
    public var locationPort: UInt16? = 947
    /// How often the endpoint looks a connected client's grant up again when nothing said
    /// it changed (`--location-recheck`); a backstop: commits and reloads trigger it at once.
    public var locationRecheck: Duration = GpsdCompatibleServer.Limits().recheckInterval
    public var logLevel = BrokerLog.Level.info
    /// nil: journal when stderr is connected to journald, else stderr.
    public var logTarget: BrokerLog.Target?
    /// `JOURNAL_STREAM` as devaccessd started with it (journald's stream on stderr, for `logTarget` nil).
    public var journalStream: String?
    /// What the environment sets of consent conversations, the status cache and the test
    /// hooks (`RequestSettings.fromEnvironment`); the per-user limits above override theirs.
    public var requestSettings = RequestSettings()
    /// TEST-ONLY (DEBUG builds): `DEVACCESS_TEST_DEVICES`, a file of declared devices.
    public var testDevices: String?

    public enum Action: Sendable, Equatable {
        case serve
        case help
        case version
    }

    /// A bad command line (the parser shared with `devaccess`).
    public typealias UsageError = DevAccessArguments.UsageError

    public init() {}

    private static func option(_ long: String, _ value: String? = nil, _ help: String) -> OptionSpec {
        OptionSpec(long: long, short: nil, value: value, help: help)
    }

    public static let spec = CommandSpec(
        name: "devaccessd",
        abstract: "devaccessd \(Daemon.version) - the devaccess broker: answers status and requests over a Unix socket",
        usage: "devaccessd [OPTIONS]",
        options: [
            option("socket", "PATH", "Listen here (default: \(BrokerProtocol.defaultSocketPath))."),
            option("state-dir", "DIR", "Ledger directory (default: $DEVACCESS_STATE_DIR or \(Ledger.systemStateDirectory))."),
            option("config-dir", "DIR", "Policy: DIR/devaccess.conf and DIR/conf.d/*.conf, read for every status "
                   + "(default: $DEVACCESS_CONFIG_DIR or /etc/devaccess)."),
            option("admin-group", "NAME", "Members may act for other users (default: devaccess-admin)."),
            option("gpsd", "HOST:PORT", "Where gpsd listens (default: $DEVACCESS_GPSD or 127.0.0.1:2947)."),
            option("gpsd-timeout", "MS", "Give up on gpsd after MS milliseconds (default: 500)."),
            option("no-location", nil, "Serve no location: no gpsd connection, 'location' answers 'unavailable', "
                   + "no gpsd endpoint."),
            option("location-port", "PORT", "gpsd's JSON protocol on 127.0.0.1:PORT and [::1]:PORT for gpsd clients, "
                   + "each served at its user's location grant; 0: none (default: 947)."),
            option("location-recheck", "SEC", "Also look every connected endpoint client's grant up again every SEC "
                   + "seconds (a revoke, expiry, switch or policy reload does at once; default: 2)."),
            option("max-connections", "N", "Clients served at once; more are told 'busy' (default: 1024)."),
            option("max-connections-per-user", "N", "Connections one user may hold (root and admins: no limit; "
                   + "default: 256)."),
            option("reserved-connections", "N", "Of --max-connections, the slots kept for root and admins "
                   + "(default: one in 16, 64 of 1024)."),
            option("idle-timeout", "SEC", "Close idle connections after SEC seconds (default: 60)."),
            option("message-timeout", "SEC", "A message must be complete SEC seconds after its first byte "
                   + "(default: 10)."),
            option("max-prompts-per-user", "N", "Requests of one user with a prompt open at once (root and admins: "
                   + "no limit; default: 4)."),
            option("max-waiting-per-user", "N", "Clients of one user waiting for an administrator at once (root and "
                   + "admins: no limit; default: 16)."),
            option("max-changes-per-user", "N", "Requests of one user that ask, queue or decide, their runs, and "
                   + "their own revokes, resets and withdraws, per minute (root and admins: no limit; default: 60)."),
            option("reconcile-interval", "SEC", "Also apply the whole ledger to the machine every SEC seconds, "
                   + "besides at start-up, on hotplug and at each expiry; 0: never (default: 60)."),
            option("log-level", "LEVEL", "error, warning, notice, info or debug (default: info)."),
            option("log-target", "TARGET", "auto, journal or stderr (default: auto: the journal when stderr is "
                   + "connected to it)."),
            OptionSpec(long: "version", short: nil, value: nil, help: "Print the version and exit.", endsParsing: true),
        ],
        discussion: """
            Runs in the foreground as root (see devaccessd.service); reports readiness with
            sd_notify(3) and stops cleanly on SIGTERM or SIGINT. See devaccessd(8).
            """)

    public static var help: String { spec.helpText }

    /// Parses `arguments` (without the program name). `environment` (read once by
    /// devaccessd's main) gives the defaults of the state and configuration directories and
    /// of gpsd's address, and the settings of docs/environment.md.
    public static func parse(_ arguments: [String],
                             environment: ProcessEnvironment) throws(UsageError) -> (DaemonOptions, Action) {
        let parsed = try ArgumentParser.parse(arguments, for: spec, environment: environment)
        if parsed.has("help") { return (DaemonOptions(), .help) }
        if parsed.has("version") { return (DaemonOptions(), .version) }
        if let word = parsed.positionals.first {
            throw UsageError(message: "unexpected argument '\(word)'")
        }
        let options = try DaemonOptions(environment: environment)
            .withPlaces(from: parsed).withLocation(from: parsed).withLimits(from: parsed).withLogging(from: parsed)
        return (try options.withReservedConnections(given: parsed.value("reserved-connections") != nil), .serve)
    }

    /// The defaults `environment` sets: the state and configuration directories, gpsd's
    /// address, consent settings, the journal's stream (and declared test devices).
    private init(environment: ProcessEnvironment) throws(UsageError) {
        if let directory = environment.stateDirectory { stateDirectory = directory }
        if let directory = environment.configDirectory { configDirectory = directory }
        journalStream = environment["JOURNAL_STREAM"]
        requestSettings = RequestSettings.fromEnvironment(environment)
        #if DEBUG
        testDevices = environment[ProcessEnvironment.Name.testDevices]
        #endif
        // The same reading as devaccess's: unset, empty or blank means the default.
        do {
            probe.gpsd = try GpsdEndpoint.fromEnvironment(environment)
        } catch {
            throw UsageError(message: "\(error)")
        }
    }

    /// The socket, the ledger's and the policy's directories, the admin group.
    private func withPlaces(from parsed: ParsedArguments) throws(UsageError) -> DaemonOptions {
        var options = self
        if let path = parsed.value("socket") {
            guard path.hasPrefix("/") else { throw UsageError(message: "'--socket' needs an absolute path, got '\(path)'") }
            options.socketPath = path
        }
        if let path = try Self.nonEmpty(parsed, "state-dir", "a directory") { options.stateDirectory = path }
        if let path = try Self.nonEmpty(parsed, "config-dir", "a directory") { options.configDirectory = path }
        if let group = try Self.nonEmpty(parsed, "admin-group", "a group name") { options.adminGroup = group }
        return options
    }

    /// gpsd's address and timeout, and the location service and its endpoint.
    private func withLocation(from parsed: ParsedArguments) throws(UsageError) -> DaemonOptions {
        var options = self
        if let text = parsed.value("gpsd") {
            do {
                options.probe.gpsd = try GpsdEndpoint(parsing: text)
            } catch {
                throw UsageError(message: "\(error)")
            }
        }
        if parsed.has("no-location") { options.servesLocation = false }
        if let port = try parsed.integer("location-port", in: 0...65_535) {
            options.locationPort = port == 0 ? nil : UInt16(port)
        }
        if let seconds = try parsed.integer("location-recheck", in: 1...3600) { options.locationRecheck = .seconds(seconds) }
        if let milliseconds = try parsed.integer("gpsd-timeout", in: 1...60_000) {
            options.probe.gpsdTimeout = .milliseconds(milliseconds)
        }
        return options
    }

    /// The connections' limits, the per-user limits of consent, the reconcile period.
    private func withLimits(from parsed: ParsedArguments) throws(UsageError) -> DaemonOptions {
        var options = self
        if let count = try parsed.integer("max-connections", in: 1...1_000_000) { options.limits.maxConnections = count }
        if let count = try parsed.integer("max-connections-per-user", in: 1...1_000_000) {
            options.limits.maxConnectionsPerUser = count
        }
        if let reserved = try parsed.integer("reserved-connections", in: 0...1_000_000) {
            options.limits.reservedConnections = reserved
        }
        if let seconds = try parsed.integer("idle-timeout", in: 1...86_400) { options.limits.idleTimeout = .seconds(seconds) }
        if let seconds = try parsed.integer("message-timeout", in: 1...3600) {
            options.limits.messageTimeout = .seconds(seconds)
        }
        if let count = try parsed.integer("max-prompts-per-user", in: 1...1_000_000) { options.maxPromptsPerUser = count }
        if let count = try parsed.integer("max-waiting-per-user", in: 1...1_000_000) { options.maxWaitingPerUser = count }
        if let count = try parsed.integer("max-changes-per-user", in: 1...1_000_000) { options.maxChangesPerMinute = count }
        if let seconds = try parsed.integer("reconcile-interval", in: 0...86_400) {
            options.reconcileInterval = seconds == 0 ? nil : .seconds(seconds)
        }
        return options
    }

    /// The log's level and target.
    private func withLogging(from parsed: ParsedArguments) throws(UsageError) -> DaemonOptions {
        var options = self
        if let text = parsed.value("log-level") {
            guard let level = BrokerLog.Level(name: text) else {
                throw UsageError(message: "'\(text)' is not a log level (error, warning, notice, info, debug)")
            }
            options.logLevel = level
        }
        if let text = parsed.value("log-target") {
            switch text {
            case "auto": options.logTarget = nil
            case "journal": options.logTarget = .journal
            case "stderr": options.logTarget = .stderr
            default: throw UsageError(message: "'\(text)' is not a log target (auto, journal, stderr)")
            }
        }
        return options
    }

    /// The slots kept for administrators: by default 1 in 16 (64 of 1024), fewer with fewer
    /// slots; given or not, fewer than all.
    private func withReservedConnections(given: Bool) throws(UsageError) -> DaemonOptions {
        var options = self
        if !given {
            options.limits.reservedConnections = min(limits.reservedConnections, limits.maxConnections / 16)
        }
        if options.limits.reservedConnections >= options.limits.maxConnections {
            throw UsageError(message: "--reserved-connections (\(options.limits.reservedConnections)) must be less than "
                + "--max-connections (\(options.limits.maxConnections)), or no user could connect")
        }
        return options
    }

    /// The option's text; nil when not given, an error when given empty.
    private static func nonEmpty(_ parsed: ParsedArguments, _ option: String, _ what: String) throws(UsageError) -> String? {
        guard let text = parsed.value(option) else { return nil }
        guard !text.isEmpty else { throw UsageError(message: "'--\(option)' needs \(what)") }
        return text
    }
}
