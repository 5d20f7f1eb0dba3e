import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import Glibc

/// What the admin commands share: the root check, opening the ledger, the engine, and
/// turning ledger and engine errors into documented exit codes.
enum AdminAccess {
    /// Admin commands work on the ledger and the nodes directly, which only root may do.
    static func requireRoot(_ command: String) throws {
        guard geteuid() == 0 else {
            throw CommandFailure(message: "'devaccess \(command)' needs root or the broker (devaccessd, not yet "
                + "available); run it as root, e.g. 'sudo devaccess \(command) ...'", code: .noPermission)
        }
    }

    /// The acting admin, from the kernel's idea of who runs this (never from the environment).
    static func actor() -> Principal {
        let uid = getuid()
        return Principal(uid: uid, name: UserDatabase.userName(uid) ?? String(uid))
    }

    /// Opens (creating and migrating when needed) the ledger in `stateDirectory`.
    static func openLedger(_ stateDirectory: String) throws -> Ledger {
        do {
            return try Ledger(stateDirectory: stateDirectory)
        } catch {
            throw failure(error)
        }
    }

    /// Opens an existing ledger for reading, migrating an older one (we are root);
    /// nil when there is no ledger file.
    static func openExistingLedger(_ stateDirectory: String) throws -> Ledger? {
        let path = stateDirectory + "/" + Ledger.fileName
        var info = stat()
        if lstat(path, &info) != 0 && errno == ENOENT { return nil }
        do {
            return try Ledger(path: path, mode: .readOnly)
        } catch .schemaOutdated {
            return try openLedger(stateDirectory)
        } catch {
            throw failure(error)
        }
    }

    static func engine(_ arguments: ParsedArguments, command: String) throws -> Enforcer {
        let stateDirectory = try CommonOptions.stateDirectory(arguments, command: command)
        let devices = try DeviceSources.source(arguments, command: command)
        return Enforcer(ledger: try openLedger(stateDirectory), devices: devices, actor: actor())
    }

    static func failure(_ error: LedgerError) -> CommandFailure {
        switch error {
        case .busy: return CommandFailure(message: error.description, code: .ledgerBusy)
        case .invalidArgument: return CommandFailure(message: error.description, code: .usage)
        case .crypto: return CommandFailure(message: error.description, code: .failure)
        default: return CommandFailure(message: error.description, code: .ledgerUnusable)
        }
    }

    static func failure(_ error: EnforcementError, command: String) -> any Error {
        switch error {
        case .ledger(.invalidArgument(let problem)):
            return UsageError(message: problem, command: command)
        case .ledger(let ledgerError):
            return failure(ledgerError)
        case .unknownDevice:
            return UsageError(message: error.description, command: command)
        }
    }

    /// Runs an engine operation, mapping its errors.
    static func run<R>(_ command: String, _ body: () throws(EnforcementError) -> R) throws -> R {
        do {
            return try body()
        } catch {
            throw failure(error, command: command)
        }
    }

    /// A user for a decision: must exist now.
    static func subject(_ arguments: ParsedArguments, command: String) throws -> Principal {
        guard arguments.value("user") != nil else {
            throw UsageError(message: "missing '--user USER' (whose access this is)", command: command)
        }
        let identity = try CommonOptions.identity(arguments, command: command)
        return Principal(uid: identity.uid, name: identity.name)
    }

    /// A user whose decisions are revoked, reset or listed: a uid of a deleted account is
    /// accepted, so its leftovers can still be cleaned up.
    static func formerOrCurrentUser(_ text: String, command: String) throws -> Principal {
        do {
            let identity = try UserDatabase.identity(for: text)
            return Principal(uid: identity.uid, name: identity.name)
        } catch .noSuchUID(let uid) {
            return Principal(uid: uid, name: String(uid))
        } catch .lookupFailed(let what, let errno) {
            throw CommandFailure(message: UserDatabase.LookupError.lookupFailed(what, errno).description)
        } catch {
            throw UsageError(message: error.description, command: command)
        }
    }
}
