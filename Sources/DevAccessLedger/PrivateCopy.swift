import Glibc
import DevAccessSystem
import CSQLite

/// Moves a ledger that an older devaccess left readable by other users into new files that
/// nobody else can have open. Whoever opened the old `ledger.db`, `-wal` or `-shm` keeps
/// those inodes, and only those: they no longer see new decisions, and a lock they hold on
/// the old `-shm` (the WAL write lock, byte 120) locks nothing the ledger uses.
///
/// 1. The old database is copied, page for page (SQLite's online backup), into
///    `ledger.db.private-<pid>`, created 0600 before SQLite writes to it. The copy is read
///    in one read transaction, so it includes what is only in the WAL.
/// 2. The copy is fsync-ed and renamed over `ledger.db`; the old `-wal` and `-shm` are
///    unlinked and the directory fsync-ed. SQLite then creates new ones, 0600 like the
///    main file.
///
/// Nothing is written to the old files: someone holding a lock on them can block writers
/// but not this reader. A crash between the rename and the unlinks leaves the copy beside
/// the old WAL; replaying that WAL writes the same pages the copy already holds (the copy
/// is page for page, which a VACUUM INTO would not be), and the next open, finding the WAL
/// still public, copies again.
enum PrivateCopy {
    /// Appended to the ledger's name, with the pid, for the copy being written.
    static let suffix = ".private-"

    /// Replaces `ledgerPath` (and its WAL files) by a private copy. Returns false, with
    /// nothing changed, when `ledgerPath` is no longer the file `original` describes once
    /// the copy is ready (another process rebuilt it first): the caller looks again.
    ///
    /// Refusals of the content (`corrupt`, `notALedger`, `schemaTooNew`) are thrown as a
    /// normal open would; any other failure is `rebuildFailed`, with the old files as they were.
    static func replace(_ ledgerPath: String, original: StateFiles.FileFacts, hasSHM: Bool,
                        busyTimeoutMilliseconds: Int32) throws(LedgerError) -> Bool {
        let directory = StateFiles.split(ledgerPath).directory
        let copyPath = ledgerPath + suffix + String(getpid())
        let copyFile = try createCopyFile(copyPath, ledgerPath: ledgerPath)
        let fd = copyFile.rawValue
        var renamed = false
        // A copy that is not renamed into place is of no use to anyone.
        defer { if !renamed { unlink(copyPath) } }

        try copy(ledgerPath, hasSHM: hasSHM, into: copyPath, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        // SQLite does not sync a backup's destination on its own (synchronous is off for it).
        guard fsync(fd) == 0 else {
            throw failed(ledgerPath, "fsync of the copy failed, the ledger is unchanged", errno)
        }
        guard try StateFiles.ledgerFile(ledgerPath, directory: directory) == original else { return false }
        guard rename(copyPath, ledgerPath) == 0 else {
            throw failed(ledgerPath, "renaming the copy into place failed, the ledger is unchanged", errno)
        }
        renamed = true
        for file in [ledgerPath + "-wal", ledgerPath + "-shm"] {
            guard unlink(file) == 0 || errno == ENOENT else {
                throw failed(ledgerPath, "the private copy is in place, but removing the old "
                                 + StateFiles.split(file).name + " failed", errno)
            }
        }
        try syncDirectory(directory, ledgerPath: ledgerPath)
        return true
    }

    /// Copies the database at `ledgerPath`, as one snapshot, into the empty file at `copyPath`.
    private static func copy(_ ledgerPath: String, hasSHM: Bool, into copyPath: String,
                             busyTimeoutMilliseconds: Int32) throws(LedgerError) {
        // mode=ro: the old files are opened O_RDONLY, so nothing is written to them.
        // readonly_shm: the -shm too; with nobody of ours on it, SQLite then reads the WAL
        // into private memory instead of rebuilding the -shm's index, which would take the
        // WAL write lock that anyone able to open the old -shm may be holding. Without a
        // -shm it is not asked for (opening one read-only would fail): SQLite creates one,
        // which is then removed with the rest.
        let uri = fileURI(ledgerPath) + "?mode=ro" + (hasSHM ? "&readonly_shm=1" : "")
        do {
            let source = try SQLiteDatabase.open(filename: uri, path: ledgerPath,
                                                 flags: SQLITE_OPEN_READONLY | SQLITE_OPEN_URI)
            try source.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
            try source.transaction(immediate: false) { db throws(LedgerError) in
                // The checks a normal open makes, before anything is written anywhere.
                let state = try Migrator.inspect(db)
                try Migrator.check(state, path: ledgerPath)
                let target = try SQLiteDatabase.open(path: copyPath, readOnly: false)
                // No journal (a failed copy is deleted) and no syncs (the file is fsync-ed whole).
                try target.execute("PRAGMA journal_mode = OFF")
                try target.execute("PRAGMA synchronous = OFF")
                try backup(db, into: target)
                // The header fields came along (user_version is the schema version).
                let copied = try Migrator.inspect(target)
                guard copied.version == state.version, copied.applicationID == state.applicationID,
                      copied.tableCount == state.tableCount else {
                    throw LedgerError.rebuildFailed(path: ledgerPath, reason: "the copy has schema version "
                        + "\(copied.version) and \(copied.tableCount) tables, the ledger \(state.version) and "
                        + "\(state.tableCount)")
                }
            }
        } catch {
            switch error {
            case .corrupt, .notALedger, .schemaTooNew, .rebuildFailed:
                throw error
            case .busy(_, let failure), .cannotOpen(_, let failure), .readOnly(_, let failure?),
                 .diskFull(_, let failure), .sqlite(_, _, let failure):
                throw .rebuildFailed(path: ledgerPath, reason: "copying it failed, the ledger is unchanged: \(failure)")
            default:
                throw .rebuildFailed(path: ledgerPath, reason: "copying it failed, the ledger is unchanged: \(error)")
            }
        }
    }

    /// SQLite's online backup of all of `source` into `target`, in the read transaction
    /// `source` has open.
    private static func backup(_ source: borrowing SQLiteDatabase, into target: borrowing SQLiteDatabase)
        throws(LedgerError)
    {
        guard let backup = sqlite3_backup_init(target.handle, "main", source.handle, "main") else {
            throw target.error(sqlite3_errcode(target.handle), "starting the copy")
        }
        let step = sqlite3_backup_step(backup, -1)
        // finish reports (and leaves on `target`) the error of a failed step.
        let finish = sqlite3_backup_finish(backup)
        guard step == SQLITE_DONE else { throw target.error(finish == SQLITE_OK ? step : finish, "copying") }
        guard finish == SQLITE_OK else { throw target.error(finish, "finishing the copy") }
    }

    /// Creates the file for the copy, 0600 from the start, so that no one else ever opens
    /// it. A leftover of the same name (an earlier run with this pid that died) is replaced.
    private static func createCopyFile(_ path: String, ledgerPath: String) throws(LedgerError) -> FileDescriptor {
        var failure: Int32 = 0
        for _ in 0..<2 {
            let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, StateFiles.fileMode)
            if fd >= 0 {
                let copy = FileDescriptor(owning: fd)
                // The umask may have removed bits: exactly 0600, which SQLite gives the new -wal/-shm.
                guard fchmod(fd, StateFiles.fileMode) == 0 else {
                    let failure = errno
                    unlink(path)
                    throw failed(ledgerPath, "chmod 0600 of the copy failed, the ledger is unchanged", failure)
                }
                return copy
            }
            failure = errno
            guard failure == EEXIST, unlink(path) == 0 else { break }
        }
        throw failed(ledgerPath, "creating \(StateFiles.split(path).name) failed, the ledger is unchanged", failure)
    }

    /// Makes the rename and unlinks durable.
    private static func syncDirectory(_ directory: String, ledgerPath: String) throws(LedgerError) {
        let opened: FileDescriptor
        do {
            opened = try .open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            throw failed(ledgerPath, "the private copy is in place, but opening its directory failed", error.errno.rawValue)
        }
        guard fsync(opened.rawValue) == 0 else {
            throw failed(ledgerPath, "the private copy is in place, but fsync of its directory failed", errno)
        }
    }

    private static func failed(_ ledgerPath: String, _ what: String, _ code: Int32) -> LedgerError {
        .rebuildFailed(path: ledgerPath, reason: "\(what): \(StateFiles.errnoText(code))")
    }

    /// `path` as an SQLite `file:` URI: every byte but unreserved characters and `/`
    /// percent-encoded, so `?`, `#` and `%` in a state directory keep their meaning.
    static func fileURI(_ path: String) -> String {
        var encoded = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "/"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = String(byte, radix: 16, uppercase: true)
                encoded += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        // An absolute path gets an empty authority ("file:///..."); a relative one none.
        return path.hasPrefix("/") ? "file://" + encoded : "file:" + encoded
    }
}
