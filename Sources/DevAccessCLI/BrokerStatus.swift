import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import DevAccessInterface
@_spi(CLI) import DevAccess

/// Options for talking to devaccessd instead of probing in-process.
enum BrokerOptions {
    static let broker = OptionSpec(long: "broker", short: nil, value: nil,
                                   help: "Ask devaccessd instead of probing here (exit 69 when it cannot be reached).")
    static let socket = OptionSpec(long: "socket", short: nil, value: "PATH",
                                   help: "devaccessd's socket (default: $DEVACCESS_SOCKET or /run/devaccess/broker.sock).")

    /// `$DEVACCESS_SOCKET` when set and not empty, else /run/devaccess/broker.sock.
    static func configuredSocketPath(_ environment: ProcessEnvironment) -> String {
        environment.socketPath ?? DeviceAccess.defaultSocketPath
    }

    static func socketPath(_ arguments: ParsedArguments, command: String) throws(UsageError) -> String {
        guard let path = arguments.value("socket") else { return configuredSocketPath(arguments.environment) }
        guard path.hasPrefix("/") || path.hasPrefix(".") else {
            throw UsageError(message: "'--socket' needs a path to a socket, got '\(path)'", command: command)
        }
        return path
    }

    /// Maps a failed read through devaccessd to the exit code and message scripts rely on
    /// (the same as the library's `DeviceAccessError` below).
    static func failure(_ error: InterfaceError, command: String) -> any Error {
        switch error {
        case .unreachable(let reason):
            return failure(.brokerUnavailable(reason), command: command)
        case .brokerBusy(let text):
            return CommandFailure(message: text, code: .brokerUnreachable)
        case .badArgument(let text):
            return failure(.noSuchUser(text), command: command)
        case .refused(_, let reason):
            return failure(.notPermitted(reason), command: command)
        default:
            return CommandFailure(message: error.description)
        }
    }

    /// Maps a failed call of the DevAccess library to the exit code and message scripts rely on.
    static func failure(_ error: DeviceAccessError, command: String) -> any Error {
        switch error {
        case .brokerUnavailable(let reason):
            return CommandFailure(message: "\(reason); \(DaemonStart.advice()), or drop --broker "
                                      + "to compute the status here", code: .brokerUnreachable)
        case .busy(let reason):
            return CommandFailure(message: "devaccessd is busy: \(reason)", code: .brokerUnreachable)
        case .noSuchUser(let reason):
            return UsageError(message: reason, command: command)
        case .notPermitted:
            return CommandFailure(message: error.description, code: .noPermission)
        default:
            return CommandFailure(message: error.description)
        }
    }
}

/// `devaccess status --broker`: the same statuses and output, computed by devaccessd
/// for the caller as the kernel identifies it (or for --user, which the broker allows
/// only for yourself, root and members of devaccess-admin).
enum BrokerStatus {
    static func run(_ permissions: [Permission], _ arguments: ParsedArguments, console: Console,
                    command: String) async throws -> ExitCode {
        guard arguments.has("broker") else {
            throw UsageError(message: "'--socket' goes with '--broker'", command: command)
        }
        for local in ["gpsd", "gpsd-timeout", "state-dir"] where arguments.value(local) != nil {
            throw UsageError(message: "'--\(local)' applies to local probes; with '--broker' devaccessd uses its own",
                             command: command)
        }
        let path = try BrokerOptions.socketPath(arguments, command: command)
        let broker: any DevAccessInterface = BrokerInterface(socketPath: path, timeout: .seconds(30))
        let reply: StatusReply
        do throws(InterfaceError) {
            reply = try await broker.status(StatusQuery(permissions: permissions == Permission.all ? nil : permissions,
                                                        user: arguments.value("user")))
        } catch {
            throw BrokerOptions.failure(error, command: command)
        }
        let user = LocalStatus.user(of: reply)
        if arguments.has("json") {
            console.out(StatusJSON.status(user: reply.user, uid: reply.uid, permissions: reply.permissions, gate: nil))
        } else {
            let rendering = StatusRendering(user: user, statuses: reply.permissions, gate: nil, time: HumanTime.now())
            console.out(arguments.has("verbose") ? rendering.verbose() : rendering.summary(),
                        style: try OutputStyle.resolve(arguments, command: command))
        }
        return .success
    }
}
