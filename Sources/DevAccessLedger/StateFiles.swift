import Glibc
import CSQLite
import DevAccessSystem

/// Keeps the ledger private: its state directory 0700, `ledger.db` and its `-wal`/`-shm`
/// 0600, all owned by the writer (root in production). The ledger holds every user's
/// decisions and reasons, which the broker shows only to that user or an admin, so the
/// files must not be readable by other local users.
///
/// Only read-write opens call this; a read-only open changes nothing. Files are checked
/// with `lstat` and changed through descriptors opened with `O_NOFOLLOW`, so a symlink
/// planted in the state directory is never followed.
enum StateFiles {
    static let directoryMode: mode_t = 0o700
    static let fileMode: mode_t = 0o600
    /// Parents created on the way to a new state directory stay traversable, as before.
    static let parentMode: mode_t = 0o755
    /// Anything for group or other.
    static let sharedBits: mode_t = 0o077

    /// Creates `directory` 0700 when missing (parents 0755); an existing one is left to
    /// `secure`, which tightens it only when it is evidently devaccess's own.
    static func createDirectory(_ directory: String) throws(LedgerError) {
        try makeDirectory(directory, mode: directoryMode, stateDirectory: directory)
    }

    /// What `lstat` says about an existing ledger file.
    struct FileFacts: Equatable {
        var device: dev_t
        var inode: ino_t
        var mode: mode_t

        var isShared: Bool { mode & StateFiles.sharedBits != 0 }
    }

    /// Makes `ledgerPath`'s directory and files private before SQLite opens them: tightens
    /// the directory, creates the ledger 0600 when missing (SQLite then gives `-wal`/`-shm`
    /// the same mode, copying it from the main file), and moves a ledger that an older
    /// devaccess left 0644 into new private files (`PrivateCopy`).
    ///
    /// Not chmod: whoever opened the public files before keeps those descriptors, and with
    /// them would read every later decision and could hold a lock on the `-shm` that blocks
    /// every write. The new files are inodes nobody else has open.
    ///
    /// A ledger file owned by another user is refused: in a state directory others can
    /// write, it may have been planted there.
    static func secure(ledgerPath: String, busyTimeoutMilliseconds: Int32) throws(LedgerError) {
        let (directory, name) = split(ledgerPath)
        try tightenDirectory(directory, ledgerName: name)
        let wal = ledgerPath + "-wal", shm = ledgerPath + "-shm"
        // Another process may create or rebuild the ledger between the checks and the
        // change (outside devaccessd and --offline, which the engine lock keeps to one):
        // each round starts again from what is there then.
        for _ in 0..<3 {
            let walFacts = try ledgerFile(wal, directory: directory)
            let shmFacts = try ledgerFile(shm, directory: directory)
            guard let mainFacts = try ledgerFile(ledgerPath, directory: directory) else {
                // A -wal/-shm without its database: SQLite discards such a WAL anyway. Public
                // ones are an older devaccess's and may be held open, locks and all: removed.
                for (file, facts) in [(wal, walFacts), (shm, shmFacts)] where facts?.isShared == true {
                    try remove(file, directory: directory)
                }
                if try createFile(ledgerPath) { return }
                continue
            }
            guard mainFacts.isShared || walFacts?.isShared == true || shmFacts?.isShared == true else { return }
            do {
                if try PrivateCopy.replace(ledgerPath, original: mainFacts, hasSHM: shmFacts != nil,
                                           busyTimeoutMilliseconds: busyTimeoutMilliseconds) { return }
            } catch {
                switch error {
                case .corrupt, .notALedger, .schemaTooNew:
                    // Refused for what it holds, so never written by this devaccess: chmod keeps
                    // new readers out without changing its content (the old rule).
                    for (file, facts) in [(ledgerPath, mainFacts), (wal, walFacts), (shm, shmFacts)] {
                        if let facts, facts.isShared { try tightenInPlace(file, facts, directory: directory) }
                    }
                default:
                    break
                }
                throw error
            }
        }
        throw .rebuildFailed(path: ledgerPath, reason: "another process kept replacing it while it was being copied")
    }

    // MARK: - Directory

    /// `mkdir -p`: `mode` for `path` itself, `parentMode` for missing parents.
    private static func makeDirectory(_ path: String, mode: mode_t, stateDirectory: String) throws(LedgerError) {
        if mkdir(path, mode) == 0 { return }
        var failure = errno
        if failure == EEXIST { return }  // its kind and mode are checked when it is opened
        if failure == ENOENT {
            let (parent, _) = split(path)
            if parent != path {
                try makeDirectory(parent, mode: parentMode, stateDirectory: stateDirectory)
                if mkdir(path, mode) == 0 || errno == EEXIST { return }
                failure = errno
            }
        }
        throw .stateDirectoryCall(path: stateDirectory, SystemCallError("mkdir", path: path, Errno(rawValue: failure)))
    }

    /// Removes group/other access from the directory holding the ledger, when the effective
    /// uid owns it and it is evidently devaccess's own: it holds nothing but ledger files
    /// (or nothing). A state directory pointed by mistake at `/`, `/etc` or `/var/lib`
    /// is thus never locked down, and neither is a shared sticky directory such as `/tmp`.
    /// A directory that does not qualify is left as it is; the files in it are still 0600.
    private static func tightenDirectory(_ directory: String, ledgerName: String) throws(LedgerError) {
        var before = stat()
        guard lstat(directory, &before) == 0 else {
            let failure = errno
            // A missing directory is reported by the file creation that follows, as before.
            if failure == ENOENT { return }
            throw .stateDirectoryCall(path: directory, SystemCallError("lstat", path: directory, Errno(rawValue: failure)))
        }
        // A symlinked state directory (an admin's choice) is not chmod-ed through the link.
        guard before.st_mode & S_IFMT == S_IFDIR else { return }
        guard before.st_uid == geteuid(), before.st_mode & sharedBits != 0, before.st_mode & S_ISVTX == 0 else { return }
        let opened: FileDescriptor
        do {
            opened = try .open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            throw .stateDirectoryCall(path: directory, error)
        }
        let fd = opened.rawValue
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .stateDirectoryCall(path: directory, .current("fstat", path: directory)) }
        guard info.st_dev == before.st_dev, info.st_ino == before.st_ino else {
            throw .stateDirectory(path: directory, reason: "it was replaced while its mode was being checked")
        }
        guard try holdsOnlyLedgerFiles(fd, directory: directory, ledgerName: ledgerName) else { return }
        guard fchmod(fd, directoryMode) == 0 else {
            throw .stateDirectoryCall(path: directory, .current("fchmod", path: directory))
        }
    }

    /// True when every entry of the directory is `ledgerName` or one of SQLite's files beside it.
    private static func holdsOnlyLedgerFiles(_ fd: Int32, directory: String, ledgerName: String) throws(LedgerError)
        -> Bool
    {
        let allowed: Set<String> = [".", "..", ledgerName, ledgerName + "-wal", ledgerName + "-shm",
                                    ledgerName + "-journal", Ledger.engineLockFileName]
        // A private copy an interrupted rebuild left behind (PrivateCopy) is devaccess's too.
        let copyPrefix = ledgerName + PrivateCopy.suffix
        // fdopendir takes the descriptor it is given; a duplicate keeps `fd` for fchmod.
        let stream: OpaquePointer
        do {
            stream = try FileDescriptor.duplicate(fd).directoryStream()
        } catch {
            throw .stateDirectoryCall(path: directory, SystemCallError(error.function, path: directory, error.errno))
        }
        defer { closedir(stream) }
        rewinddir(stream)
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            // So are audit archives written beside the ledger (ArchiveFile).
        if !allowed.contains(name) && !name.hasPrefix(copyPrefix) && !name.hasPrefix(ArchiveFile.namePrefix) { return false }
        }
        return true
    }

    // MARK: - Files

    /// What `lstat` says about `path`, nil when there is no such file. Refuses a symlink or
    /// a non-regular file (SQLite would read or write through it) and another owner's file.
    static func ledgerFile(_ path: String, directory: String) throws(LedgerError) -> FileFacts? {
        let name = split(path).name
        var info = stat()
        guard lstat(path, &info) == 0 else {
            let failure = errno
            if failure == ENOENT { return nil }
            throw .stateDirectoryCall(path: directory, SystemCallError("lstat", path: path, Errno(rawValue: failure)))
        }
        guard info.st_mode & S_IFMT != S_IFLNK else {
            throw .stateDirectory(path: directory, reason: "\(name) is a symbolic link; devaccess does not follow it")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw .stateDirectory(path: directory, reason: "\(name) is not a regular file")
        }
        // Another user's ledger file may have been planted (in a state directory others can
        // write): it is refused, neither used nor chmod-ed.
        guard info.st_uid == geteuid() else {
            throw .foreignOwner(path: path, owner: info.st_uid, expected: geteuid())
        }
        return FileFacts(device: info.st_dev, inode: info.st_ino, mode: info.st_mode & 0o7777)
    }

    /// chmod 0600 of the file `facts` describes, if `path` still is that file.
    private static func tightenInPlace(_ path: String, _ facts: FileFacts, directory: String) throws(LedgerError) {
        let name = split(path).name
        // O_NONBLOCK: never hang on a FIFO swapped in after the lstat; the fstat below refuses it.
        let opened: FileDescriptor
        do {
            opened = try .open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        } catch {
            throw .stateDirectoryCall(path: directory, error)
        }
        let fd = opened.rawValue
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw .stateDirectoryCall(path: directory, .current("fstat", path: path))
        }
        guard info.st_dev == facts.device, info.st_ino == facts.inode else {
            throw .stateDirectory(path: directory, reason: "\(name) was replaced while its mode was being checked")
        }
        guard fchmod(fd, fileMode) == 0 else {
            throw .stateDirectoryCall(path: directory, .current("fchmod", path: path))
        }
    }

    /// Unlinks `path`; already gone is fine.
    static func remove(_ path: String, directory: String) throws(LedgerError) {
        guard unlink(path) == 0 || errno == ENOENT else {
            throw .stateDirectory(path: directory, reason: "removing \(split(path).name): \(errnoText(errno))")
        }
    }

    /// Creates an empty ledger file 0600, which SQLite then treats as a new database.
    /// False when another process created it first (it is then checked like any existing
    /// one). A failure here is the one SQLite would have hit creating it, so it is reported
    /// the same way (`cannotOpen`: missing or unwritable directory).
    private static func createFile(_ path: String) throws(LedgerError) -> Bool {
        let failure: CInt
        do {
            _ = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, mode: fileMode)
            return true
        } catch {
            failure = error.errno.rawValue
        }
        if failure == EEXIST { return false }
        throw .cannotOpen(path: path, SQLiteFailure(code: SQLITE_CANTOPEN,
                                                    message: "cannot create the file: \(errnoText(failure))"))
    }

    // MARK: - Helpers

    /// The size of a ledger file with its WAL (what it takes on disk, roughly).
    static func bytes(of ledgerPath: String) -> Int64 {
        var total: Int64 = 0
        for file in [ledgerPath, ledgerPath + "-wal"] {
            var info = stat()
            if lstat(file, &info) == 0 { total += Int64(info.st_size) }
        }
        return total
    }

    /// The directory part and the last component, `"."` for a bare name.
    static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let name = String(path[path.index(after: slash)...])
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, name)
    }

    /// strerror's text for the messages that still carry a reason string (archives, the
    /// private copy); new code throws a `SystemCallError`.
    static func errnoText(_ code: Int32) -> String { Errno(rawValue: code).message }
}
