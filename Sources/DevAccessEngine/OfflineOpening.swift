import DevAccessCore
import DevAccessEnforcement
import DevAccessInterface
import DevAccessLedger
import DevAccessSystem
import Glibc

/// The engine in the caller's process (`--offline`: root, devaccessd stopped), opened under
/// the engine lock over the ledger and devices these reads name. The caller checks root and
/// that no devaccessd answers first; what fails here is said as the contract's error.
extension EngineReads {
    /// `readOnly` (list, audit): the ledger is opened read-only and never created (an
    /// immutable or missing ledger can still be read or reported), and no device is probed.
    /// `probesDevices` false (archive): the ledger is written, but no device is touched.
    public func offlineEngine(readOnly: Bool, probesDevices: Bool, testCrashAt: String?) throws(InterfaceError)
        -> any DevAccessInterface
    {
        do {
            try Ledger.prepareStateDirectory(stateDirectory)
        } catch {
            throw InterfaceError(EnforcementError.ledger(error))
        }
        let lock: EngineLock
        do {
            lock = try EngineLock(stateDirectory: stateDirectory)
        } catch .held(let path) {
            throw .busy(EngineLock.Failure.held(path: path).description
                + "; " + DaemonStart.stopAdvice() + " or wait for the other command")
        } catch {
            throw .ledgerUnusable(error.description)
        }
        let ledger: Ledger
        do {
            ledger = readOnly ? try Self.readingLedger(stateDirectory)
                : try Ledger(stateDirectory: stateDirectory, busyTimeout: Ledger.writerBusyTimeout)
        } catch {
            throw InterfaceError(EnforcementError.ledger(error))
        }
        let devices: any DeviceSource = readOnly || !probesDevices ? NoDevices() : try deviceSource()
        let root = Principal(uid: getuid(), name: UserDatabase.userName(getuid()) ?? String(getuid()))
        // The policy as devaccessd would apply it: grants it forbids end, remaining access is drift.
        let policyDirectory = policyDirectory
        var engine = Enforcer(ledger: ledger, devices: devices, actor: root,
                              policy: { PolicyReading.read(directory: policyDirectory) })
        engine.testCrashAt = testCrashAt
        return EngineService(caller: Caller(principal: root, standing: .root),
                             runner: OfflineEngine(enforcer: engine, lock: lock))
    }

    /// Whether the ledger file is missing: reading commands then say so instead of creating it.
    public var ledgerIsMissing: Bool {
        var info = stat()
        return lstat(ledgerPath, &info) != 0 && errno == ENOENT
    }

    public var ledgerPath: String { stateDirectory + "/" + Ledger.fileName }

    /// Whether the ledger is there but this process may not read it (it is root's alone):
    /// its decisions are then devaccessd's to tell.
    public var ledgerIsPrivate: Bool {
        access(ledgerPath, R_OK) != 0 && (errno == EACCES || errno == EPERM)
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
}
