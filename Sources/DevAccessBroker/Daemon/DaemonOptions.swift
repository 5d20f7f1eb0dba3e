import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessHardware
import DevAccessLedger
import DevAccessProtocol

/// devaccessd's command line. Every option has a default that fits the systemd unit.
public struct DaemonOptions: Sendable {
    public var socketPath = BrokerProtocol.defaultSocketPath
    public var stateDirectory = Ledger.defaultStateDirectory
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

    public enum Action: Sendable, Equatable {
        case serve
        case help
        case version
    }

    public struct UsageError: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    public init() {}

    public static let help = """
        devaccessd \(Daemon.version) - the devaccess broker: answers status and requests over a Unix socket

        Usage: devaccessd [OPTIONS]

        Options:
          --socket PATH          Listen here (default: \(BrokerProtocol.defaultSocketPath)).
          --state-dir DIR        Ledger directory (default: $DEVACCESS_STATE_DIR or \(Ledger.systemStateDirectory)).
          --config-dir DIR       Policy: DIR/devaccess.conf and DIR/conf.d/*.conf, read for every
                                 status (default: $DEVACCESS_CONFIG_DIR or /etc/devaccess).
          --admin-group NAME     Members may act for other users (default: devaccess-admin).
          --gpsd HOST:PORT       Where gpsd listens (default: $DEVACCESS_GPSD or 127.0.0.1:2947).
          --gpsd-timeout MS      Give up on gpsd after MS milliseconds (default: 500).
          --no-location          Serve no location: no gpsd connection, 'location' answers
                                 'unavailable', no gpsd endpoint.
          --location-port PORT   gpsd's JSON protocol on 127.0.0.1:PORT and [::1]:PORT for
                                 gpsd clients, each served at its user's location grant;
                                 0: none (default: 947).
          --location-recheck SEC Also look every connected endpoint client's grant up again
                                 every SEC seconds (a revoke, expiry, switch or policy
                                 reload does at once; default: 2).
          --max-connections N    Clients served at once; more are told 'busy' (default: 1024).
          --max-connections-per-user N
                                 Connections one user may hold (root and admins: no limit;
                                 default: 256).
          --reserved-connections N
                                 Of --max-connections, the slots kept for root and admins
                                 (default: one in 16, 64 of 1024).
          --idle-timeout SEC     Close idle connections after SEC seconds (default: 60).
          --message-timeout SEC  A message must be complete SEC seconds after its first
                                 byte (default: 10).
          --max-prompts-per-user N
                                 Requests of one user with a prompt open at once (root and
                                 admins: no limit; default: 4).
          --max-waiting-per-user N
                                 Clients of one user waiting for an administrator at once
                                 (root and admins: no limit; default: 16).
          --max-changes-per-user N
                                 Requests of one user that ask, queue or decide, and their
                                 own revokes, resets and withdraws, per minute (root and
                                 admins: no limit; default: 60).
          --reconcile-interval SEC
                                 Also apply the whole ledger to the machine every SEC seconds,
                                 besides at start-up, on hotplug and at each expiry; 0: never
                                 (default: 60).
          --log-level LEVEL      error, warning, notice, info or debug (default: info).
          --log-target TARGET    auto, journal or stderr (default: auto: the journal when
                                 stderr is connected to it).
          -h, --help             Show this help and exit.
          --version              Print the version and exit.

        Runs in the foreground as root (see devaccessd.service); reports readiness with
        sd_notify(3) and stops cleanly on SIGTERM or SIGINT. See devaccessd(8).
        """

    /// Parses `arguments` (without the program name).
    public static func parse(_ arguments: [String],
                             environment: [String: String]) throws(UsageError) -> (DaemonOptions, Action) {
        var options = DaemonOptions()
        var reservedGiven = false
        if let directory = environment["DEVACCESS_STATE_DIR"], !directory.isEmpty { options.stateDirectory = directory }
        if let directory = environment["DEVACCESS_CONFIG_DIR"], !directory.isEmpty { options.configDirectory = directory }
        if let text = environment[GpsdEndpoint.environmentVariable], !text.isEmpty {
            do {
                options.probe.gpsd = try GpsdEndpoint(parsing: text)
            } catch {
                throw UsageError(message: "\(GpsdEndpoint.environmentVariable): \(error)")
            }
        }
        var index = 0
        func value(_ name: String, inline: String?) throws(UsageError) -> String {
            if let inline { return inline }
            guard index < arguments.count else { throw UsageError(message: "missing value for '\(name)'") }
            index += 1
            return arguments[index - 1]
        }
        func number(_ name: String, _ text: String, _ range: ClosedRange<Int>) throws(UsageError) -> Int {
            guard let number = Int(text), range.contains(number) else {
                throw UsageError(message: "'\(text)' is not a number in \(range.lowerBound)...\(range.upperBound) for '\(name)'")
            }
            return number
        }
        while index < arguments.count {
            let word = arguments[index]
            index += 1
            var name = word
            var inline: String?
            if word.hasPrefix("--"), let equals = word.firstIndex(of: "=") {
                name = String(word[..<equals])
                inline = String(word[word.index(after: equals)...])
            }
            switch name {
            case "-h", "--help":
                return (options, .help)
            case "--version":
                return (options, .version)
            case "--socket":
                let path = try value(name, inline: inline)
                guard path.hasPrefix("/") else { throw UsageError(message: "'--socket' needs an absolute path, got '\(path)'") }
                options.socketPath = path
            case "--state-dir":
                let path = try value(name, inline: inline)
                guard !path.isEmpty else { throw UsageError(message: "'--state-dir' needs a directory") }
                options.stateDirectory = path
            case "--config-dir":
                let path = try value(name, inline: inline)
                guard !path.isEmpty else { throw UsageError(message: "'--config-dir' needs a directory") }
                options.configDirectory = path
            case "--admin-group":
                let group = try value(name, inline: inline)
                guard !group.isEmpty else { throw UsageError(message: "'--admin-group' needs a group name") }
                options.adminGroup = group
            case "--gpsd":
                let text = try value(name, inline: inline)
                do {
                    options.probe.gpsd = try GpsdEndpoint(parsing: text)
                } catch {
                    throw UsageError(message: "\(error)")
                }
            case "--no-location":
                guard inline == nil else { throw UsageError(message: "'--no-location' takes no value") }
                options.servesLocation = false
            case "--location-port":
                let port = try number(name, try value(name, inline: inline), 0...65_535)
                options.locationPort = port == 0 ? nil : UInt16(port)
            case "--location-recheck":
                options.locationRecheck = .seconds(try number(name, try value(name, inline: inline), 1...3600))
            case "--gpsd-timeout":
                options.probe.gpsdTimeout = .milliseconds(try number(name, try value(name, inline: inline), 1...60_000))
            case "--max-connections":
                options.limits.maxConnections = try number(name, try value(name, inline: inline), 1...1_000_000)
            case "--max-connections-per-user":
                options.limits.maxConnectionsPerUser = try number(name, try value(name, inline: inline), 1...1_000_000)
            case "--reserved-connections":
                options.limits.reservedConnections = try number(name, try value(name, inline: inline), 0...1_000_000)
                reservedGiven = true
            case "--idle-timeout":
                options.limits.idleTimeout = .seconds(try number(name, try value(name, inline: inline), 1...86_400))
            case "--message-timeout":
                options.limits.messageTimeout = .seconds(try number(name, try value(name, inline: inline), 1...3600))
            case "--max-prompts-per-user":
                options.maxPromptsPerUser = try number(name, try value(name, inline: inline), 1...1_000_000)
            case "--max-waiting-per-user":
                options.maxWaitingPerUser = try number(name, try value(name, inline: inline), 1...1_000_000)
            case "--max-changes-per-user":
                options.maxChangesPerMinute = try number(name, try value(name, inline: inline), 1...1_000_000)
            case "--reconcile-interval":
                let seconds = try number(name, try value(name, inline: inline), 0...86_400)
                options.reconcileInterval = seconds == 0 ? nil : .seconds(seconds)
            case "--log-level":
                let text = try value(name, inline: inline)
                guard let level = BrokerLog.Level(name: text) else {
                    throw UsageError(message: "'\(text)' is not a log level (error, warning, notice, info, debug)")
                }
                options.logLevel = level
            case "--log-target":
                let text = try value(name, inline: inline)
                switch text {
                case "auto": options.logTarget = nil
                case "journal": options.logTarget = .journal
                case "stderr": options.logTarget = .stderr
                default: throw UsageError(message: "'\(text)' is not a log target (auto, journal, stderr)")
                }
            default:
                throw UsageError(message: word.hasPrefix("-") ? "unknown option '\(word)'" : "unexpected argument '\(word)'")
            }
        }
        if !reservedGiven {
            // The default keeps 1 slot in 16 for administrators (64 of 1024), fewer with fewer slots.
            options.limits.reservedConnections = min(options.limits.reservedConnections, options.limits.maxConnections / 16)
        }
        if options.limits.reservedConnections >= options.limits.maxConnections {
            throw UsageError(message: "--reserved-connections (\(options.limits.reservedConnections)) must be less than "
                + "--max-connections (\(options.limits.maxConnections)), or no user could connect")
        }
        return (options, .serve)
    }
}
