import CSQLite
import DevAccessSystem

/// What SQLite said when a call failed: the extended result code and its message.
/// Kept whole so that no error loses the code it came from.
public struct SQLiteFailure: Sendable, Hashable, CustomStringConvertible {
    /// The extended result code (`SQLITE_READONLY_DBMOVED`, ...); `primaryCode` is its low byte.
    public let code: Int32
    public let message: String

    public init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }

    public var primaryCode: Int32 { code & 0xff }
    public var description: String { "\(message) (SQLite result code \(code))" }
}

/// Every way the ledger can fail. Each case names the file and ends its description
/// with what to do about it.
public enum LedgerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The file or its directory cannot be opened or created.
    case cannotOpen(path: String, SQLiteFailure)
    /// The file is not an SQLite database, or its pages are damaged.
    case corrupt(path: String, SQLiteFailure)
    /// A valid SQLite database that devaccess did not create.
    case notALedger(path: String, reason: String)
    /// Written by a newer devaccess; opening it would risk losing what that version stores.
    case schemaTooNew(path: String, found: Int32, known: Int32)
    /// Older than this devaccess and opened read-only, so it cannot be migrated here.
    case schemaOutdated(path: String, found: Int32, known: Int32)
    /// A write was refused: the ledger was opened read-only, or the file system or
    /// file flags forbid writing. `failure` is nil when devaccess refused on its own.
    case readOnly(path: String, SQLiteFailure?)
    /// Another process held the database lock longer than the busy timeout.
    case busy(path: String, SQLiteFailure)
    case diskFull(path: String, SQLiteFailure)
    /// A schema migration failed and was rolled back; the file is as it was.
    case migrationFailed(path: String, toVersion: Int32, SQLiteFailure)
    /// The state directory could not be created, or it or a ledger file in it could not
    /// be made private (a symlink or non-regular file in place of one, a failed chmod).
    case stateDirectory(path: String, reason: String)
    /// As `stateDirectory`, when a system call said why: the call, its path and errno.
    case stateDirectoryCall(path: String, SystemCallError)
    /// A ledger file (`ledger.db`, `-wal` or `-shm`) belongs to another user than the one
    /// opening it read-write: possibly planted in a shared state directory, so not trusted.
    case foreignOwner(path: String, owner: UInt32, expected: UInt32)
    /// An older devaccess left the ledger readable by other users, and moving it into new,
    /// private files failed; `reason` says whether the old files are as they were.
    case rebuildFailed(path: String, reason: String)
    /// A stored row holds a value this code cannot read back (edited by hand?).
    case invalidRow(path: String, table: String, rowID: Int64, problem: String)
    /// A caller passed a value the ledger cannot store.
    case invalidArgument(String)
    /// An audit archive cannot be written there: the target exists, is a symlink, or its
    /// directory can be changed by other users.
    case archiveTarget(path: String, reason: String)
    /// An audit archive file cannot be used (not an archive, unreadable), or archiving was
    /// refused (the chain is broken).
    case archive(path: String, reason: String)
    /// libcrypto could not provide SHA-256.
    case crypto(String)
    /// The program to hash could not be read.
    case programUnreadable(SystemCallError)
    /// Any other SQLite failure, with the operation that hit it.
    case sqlite(path: String, operation: String, SQLiteFailure)

    /// Sorts an SQLite failure into the case a caller can act on.
    static func classify(_ failure: SQLiteFailure, path: String, operation: String) -> LedgerError {
        switch failure.primaryCode {
        case SQLITE_NOTADB, SQLITE_CORRUPT: return .corrupt(path: path, failure)
        case SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_AUTH: return .cannotOpen(path: path, failure)
        case SQLITE_READONLY: return .readOnly(path: path, failure)
        case SQLITE_BUSY, SQLITE_LOCKED: return .busy(path: path, failure)
        case SQLITE_FULL: return .diskFull(path: path, failure)
        default: return .sqlite(path: path, operation: operation, failure)
        }
    }

    public var description: String {
        switch self {
        case .cannotOpen(let path, let failure):
            return "cannot open ledger \(path): \(failure); check that the directory exists and is writable by this user"
                + " (or set DEVACCESS_STATE_DIR / --state-dir)"
        case .corrupt(let path, let failure):
            return "ledger \(path) is not a readable database: \(failure); move it aside and restore it from a backup"
                + " (devaccess does not repair it, so the audit trail is kept as evidence)"
        case .notALedger(let path, let reason):
            return "\(path) is not a devaccess ledger: \(reason); point --state-dir at a directory of its own"
        case .schemaTooNew(let path, let found, let known):
            return "ledger schema version \(found) is newer than this devaccess (knows \(known)); upgrade devaccess"
                + " (ledger: \(path), left unchanged)"
        case .schemaOutdated(let path, let found, let known):
            return "ledger \(path) has schema version \(found), this devaccess needs \(known); run devaccess once as root"
                + " (or start devaccessd) to migrate it"
        case .readOnly(let path, let failure?):
            return "ledger \(path) cannot be written: \(failure); check file flags (lsattr), the mount and ownership"
        case .readOnly(let path, nil):
            return "ledger \(path) was opened read-only; writing needs root or the broker"
        case .busy(let path, let failure):
            return "ledger \(path) stayed locked by another process: \(failure); retry, or find the holder with 'fuser \(path)'"
        case .diskFull(let path, let failure):
            return "ledger \(path) cannot grow: \(failure); free space on its file system"
        case .migrationFailed(let path, let version, let failure):
            return "migrating ledger \(path) to schema version \(version) failed and was rolled back: \(failure);"
                + " the file is unchanged, report this with the message"
        case .stateDirectory(let path, let reason):
            return "cannot set up state directory \(path): \(reason); create it (root, mode 0700, ledger files 0600)"
                + " or choose another with DEVACCESS_STATE_DIR"
        case .stateDirectoryCall(let path, let failure):
            return LedgerError.stateDirectory(path: path, reason: failure.description).description
        case .foreignOwner(let path, let owner, let expected):
            return "ledger file \(path) belongs to uid \(owner), not to uid \(expected) that writes the ledger; it is not"
                + " trusted (planted in a shared state directory?): check where it came from, then move it aside or"
                + " 'chown \(expected) \(path)'"
        case .rebuildFailed(let path, let reason):
            return "ledger \(path) was readable by other users and could not be moved into private files: \(reason)."
                + " Most likely another process has held the ledger open since before it was made private: stop it"
                + " (fuser -v \(path) \(path)-wal \(path)-shm) and start again"
        case .invalidRow(let path, let table, let rowID, let problem):
            return "ledger \(path): row \(rowID) of \(table) is unreadable: \(problem); run 'devaccess audit --verify'"
        case .invalidArgument(let problem):
            return "invalid ledger input: \(problem)"
        case .archiveTarget(let path, let reason):
            return "cannot write the audit archive to \(path): \(reason); name a new file in a directory only root can "
                + "change (or leave out --to: it then goes to the state directory)"
        case .archive(let path, let reason):
            return "audit archive \(path): \(reason)"
        case .crypto(let problem):
            return "SHA-256 unavailable from libcrypto: \(problem); check the OpenSSL installation"
        case .programUnreadable(let failure):
            return "cannot read the program to hash it: \(failure)"
        case .sqlite(let path, let operation, let failure):
            return "ledger \(path): \(operation) failed: \(failure)"
        }
    }
}
