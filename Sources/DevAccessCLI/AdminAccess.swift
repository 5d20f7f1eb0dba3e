import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessInterface
import DevAccessSystem
import Glibc
import DevAccessEngine

/// How the commands that decide or record reach the engine: through devaccessd (the one
/// writer while it runs), or, with `--offline`, in this process under the engine lock
/// (root, daemon down: the documented repair mode).
enum AdminAccess {
    static let offline = OptionSpec(long: "offline", short: nil, value: nil,
                                    help: "Root, with devaccessd stopped: do it here, under the engine lock (repair mode).")
    static let options = [offline, CommonOptions.stateDir, BrokerOptions.socket]
    static let help = """
        Goes through devaccessd, which does it as the kernel identifies you (exit 69 when it
        cannot be reached). With --offline (root only, devaccessd stopped) devaccess runs the
        engine itself under the engine lock; it refuses while devaccessd answers (exit 75).
        """

    /// The interface for this command: the broker, or the engine here with `--offline`.
    /// `readOnly` (list, audit): offline, the ledger is opened read-only and never created
    /// (an immutable or missing ledger can still be read or reported), and no device is probed.
    /// `probesDevices` false (archive): the ledger is written, but no device is touched.
    static func interface(_ arguments: ParsedArguments, command: String,
                          readOnly: Bool = false, probesDevices: Bool = true) throws -> any DevAccessInterface {
        let socketPath = try BrokerOptions.socketPath(arguments, command: command)
        guard arguments.has("offline") else {
            if arguments.value("state-dir") != nil {
                throw UsageError(message: "'--state-dir' goes with '--offline'; devaccessd uses its own", command: command)
            }
            return BrokerInterface(socketPath: socketPath)
        }
        guard geteuid() == 0 else {
            throw CommandFailure(message: "'devaccess \(command) --offline' needs root: it edits the ledger and device "
                + "ACLs itself; without --offline, devaccessd does it for you", code: .noPermission)
        }
        // A daemon that answers owns the machine, even one whose state directory differs.
        if let hello = try? BrokerSession(socketPath: socketPath, timeout: .seconds(2)).hello() {
            throw CommandFailure(message: "devaccessd (\(hello.server)) answers on \(socketPath): it is the one writer "
                + "while it runs; run the command without --offline", code: .ledgerBusy)
        }
        let reads = try CommonOptions.reads(arguments, command: command)
        do throws(InterfaceError) {
            return try reads.offlineEngine(readOnly: readOnly, probesDevices: probesDevices,
                                           testCrashAt: arguments.environment[ProcessEnvironment.Name.testCrashAt])
        } catch {
            throw failure(error, command: command)
        }
    }

    /// With `--offline` (as root), whether the ledger file is missing: reading commands then
    /// say so (its path) instead of creating it.
    static func offlineLedgerIsMissing(_ arguments: ParsedArguments, command: String) throws -> String? {
        guard arguments.has("offline"), geteuid() == 0 else { return nil }
        let reads = try CommonOptions.reads(arguments, command: command)
        return reads.ledgerIsMissing ? reads.ledgerPath : nil
    }

    /// Runs one interface call, mapping its failure to the documented exit codes.
    static func call<R>(_ command: String, _ body: () async throws(InterfaceError) -> R) async throws -> R {
        do {
            return try await body()
        } catch {
            throw failure(error, command: command)
        }
    }

    static func failure(_ error: InterfaceError, command: String) -> any Error {
        switch error {
        case .refused: return CommandFailure(message: error.description, code: .noPermission)
        case .badArgument(let text): return UsageError(message: text, command: command)
        case .notFound: return CommandFailure(message: error.description, code: .failure)
        case .busy: return CommandFailure(message: error.description, code: .ledgerBusy)
        case .ledgerUnusable: return CommandFailure(message: error.description, code: .ledgerUnusable)
        case .unreachable(let text):
            return CommandFailure(message: "\(text); \(DaemonStart.advice()), or as root with the "
                + "daemon stopped repeat the command with --offline", code: .brokerUnreachable)
        case .brokerBusy: return CommandFailure(message: error.description, code: .brokerUnreachable)
        case .unavailable: return CommandFailure(message: error.description, code: .unavailable)
        case .failed: return CommandFailure(message: error.description, code: .failure)
        }
    }

    /// The `--user` given, else the caller by uid: devaccessd judges from the kernel's view of
    /// the caller whether it may act for that user (`reset`, `revoke`).
    static func userOrSelf(_ arguments: ParsedArguments, command: String) throws -> String {
        guard let named = arguments.value("user") else { return String(getuid()) }
        guard !named.isEmpty else { throw UsageError(message: "empty '--user'", command: command) }
        return named
    }

    /// The `--user` of an admin command, as given (the broker resolves it).
    static func user(_ arguments: ParsedArguments, command: String, purpose: String) throws -> String {
        guard let text = arguments.value("user"), !text.isEmpty else {
            throw UsageError(message: "missing '--user USER' (\(purpose))", command: command)
        }
        return text
    }
}
