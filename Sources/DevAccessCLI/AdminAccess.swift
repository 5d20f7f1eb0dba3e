import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessEnforcement
import DevAccessInterface
import DevAccessLedger
import DevAccessProtocol
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
        let stateDirectory = try CommonOptions.stateDirectory(arguments, command: command)
        do {
            try Ledger.prepareStateDirectory(stateDirectory)
        } catch {
            throw failure(InterfaceError(EnforcementError.ledger(error)), command: command)
        }
        let lock: EngineLock
        do {
            lock = try EngineLock(stateDirectory: stateDirectory)
        } catch .held(let path) {
            throw CommandFailure(message: EngineLock.Failure.held(path: path).description
                + "; stop devaccessd ('systemctl stop devaccessd') or wait for the other command", code: .ledgerBusy)
        } catch {
            throw CommandFailure(message: error.description, code: .ledgerUnusable)
        }
        let ledger: Ledger
        do {
            ledger = readOnly ? try readingLedger(stateDirectory)
                : try Ledger(stateDirectory: stateDirectory, busyTimeout: Ledger.writerBusyTimeout)
        } catch {
            throw failure(InterfaceError(EnforcementError.ledger(error)), command: command)
        }
        let devices: any DeviceSource = readOnly || !probesDevices ? NoDevices()
            : try CommonOptions.reads(arguments, command: command).deviceSource
        let root = Principal(uid: getuid(), name: UserDatabase.userName(getuid()) ?? String(getuid()))
        // The policy as devaccessd would apply it: grants it forbids end, remaining access is drift.
        let configDirectory = PolicyFiles.directory(arguments.environment)
        var engine = Enforcer(ledger: ledger, devices: devices, actor: root,
                              policy: { PolicyReading.read(directory: configDirectory) })
        engine.testCrashAt = arguments.environment[ProcessEnvironment.Name.testCrashAt]
        return EngineService(caller: Caller(principal: root, isAdmin: true),
                             runner: OfflineEngine(enforcer: engine, lock: lock))
    }

    /// The ledger for reading: read-only, migrated first when an older devaccess wrote it.
    /// Under the engine lock this process is the one writer: a chain walk's checkpoint is
    /// stored (when the file can be written), as devaccessd stores its own.
    private static func readingLedger(_ stateDirectory: String) throws(LedgerError) -> Ledger {
        let path = stateDirectory + "/" + Ledger.fileName
        let ledger: Ledger
        do {
            ledger = try Ledger(path: path, mode: .readOnly)
        } catch .schemaOutdated {
            ledger = try Ledger(stateDirectory: stateDirectory)
        }
        ledger.writesCheckpoints()
        return ledger
    }

    /// Reading the ledger needs no devices.
    private struct NoDevices: DeviceSource {
        func report(for permission: Permission) -> AdapterReport {
            AdapterReport(permission: permission, devices: [], unavailableReason: "not probed")
        }
    }

    /// With `--offline` (as root), whether the ledger file is missing: reading commands then
    /// say so instead of creating it.
    static func offlineLedgerIsMissing(_ arguments: ParsedArguments, command: String) throws -> String? {
        guard arguments.has("offline"), geteuid() == 0 else { return nil }
        let path = try CommonOptions.stateDirectory(arguments, command: command) + "/" + Ledger.fileName
        var info = stat()
        return lstat(path, &info) != 0 && errno == ENOENT ? path : nil
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
            return CommandFailure(message: "\(text); start it ('systemctl start devaccessd'), or as root with the "
                + "daemon stopped repeat the command with --offline", code: .brokerUnreachable)
        case .brokerBusy: return CommandFailure(message: error.description, code: .brokerUnreachable)
        case .unavailable: return CommandFailure(message: error.description, code: .unavailable)
        case .failed: return CommandFailure(message: error.description, code: .failure)
        }
    }

    /// The `--user` of an admin command, as given (the broker resolves it).
    static func user(_ arguments: ParsedArguments, command: String, purpose: String) throws -> String {
        guard let text = arguments.value("user"), !text.isEmpty else {
            throw UsageError(message: "missing '--user USER' (\(purpose))", command: command)
        }
        return text
    }
}
