import FoundationEssentials
import Glibc
import Synchronization
import CSQLite
import DevAccessCore
import DevAccessSystem

/// The grant ledger: one SQLite file holding decisions, the ACL entries devaccess made,
/// and the hash-chained audit trail.
///
/// A `final class` around `Mutex`-guarded connections rather than an actor: the CLI
/// calls it from plain synchronous code, every call is short blocking I/O that an actor
/// would also run on (and block) a cooperative thread, and one connection must be used
/// by one thread at a time anyway. Opened read-write it keeps two connections, one for
/// writes and one for reads: a write that waits out the busy timeout (another process
/// holds SQLite's write lock) then never holds up a reader such as a status query, which
/// WAL lets proceed. Several processes may open the same file: SQLite's own locking plus
/// `BEGIN IMMEDIATE` and a busy timeout order their writes.
public final class Ledger: Sendable {
    public enum OpenMode: Sendable, Hashable {
        /// Creates and migrates the file when needed; the broker and root CLI.
        case readWrite
        /// Never writes (`query_only`); for status queries by unprivileged users.
        case readOnly
    }

    public static let fileName = "ledger.db"
    /// Beside the ledger: whoever holds a lock on it is the one writer (DevAccessEngine's `EngineLock`).
    public static let engineLockFileName = "engine.lock"
    public static let systemStateDirectory = "/var/lib/devaccess"
    /// The schema version this build writes and understands.
    public static var schemaVersion: Int32 { Schema.currentVersion }
    /// How long the one writer (devaccessd, `--offline`) waits for SQLite's write lock.
    /// Nothing else writes while it runs, so a lock held longer is a stray holder (an open
    /// `sqlite3` shell, a backup, a hostile root process): the engine then fails closed
    /// (ends access without the record) rather than keep access alive while it waits.
    public static let writerBusyTimeout = Duration.milliseconds(250)

    /// `$DEVACCESS_STATE_DIR` when set and not empty, else `/var/lib/devaccess`.
    public static func stateDirectory(environment: ProcessEnvironment) -> String {
        environment.stateDirectory ?? systemStateDirectory
    }

    public let path: String
    public let mode: OpenMode
    private let journal: JournalExport
    private let connection: Mutex<SQLiteDatabase>
    /// Reads of a read-write ledger: never queued behind a write waiting for the lock.
    private let readConnection: Mutex<SQLiteDatabase>?
    /// The newest chain position this object walked intact (`ChainCheckpoint`).
    let verifiedThrough = Mutex<ChainCheckpoint?>(nil)
    /// Each write transaction of this object, after it committed (the pushes: the gpsd
    /// endpoint's grant lookups); `appends` is the same moment for those who wait for a seq.
    public let commits = LedgerCommits()
    /// Signalled after every write that appended audit events (`audit --follow`).
    public let appends = AuditAppendSignal()
    /// Whether an intact walk stores its checkpoint in the file: always when opened for
    /// writing; opened read-only, only when the opener is the one writer
    /// (`writesCheckpoints()`: an offline report under the engine lock), not a bystander
    /// such as `doctor`, which may run beside devaccessd.
    let storesCheckpoints: Atomic<Bool>

    /// Opens the ledger at `path`. Every refusal (corrupt, foreign, newer schema,
    /// unwritable) happens before anything is written to the file.
    ///
    /// Read-write, it first makes the ledger private (`StateFiles`): the file is created
    /// 0600, the directory, when it holds nothing else, is tightened to 0700, and a ledger
    /// an older devaccess left readable by others is copied, content unchanged, into new
    /// 0600 files that replace the old ones (`PrivateCopy`). A ledger file owned by another
    /// user is refused. Read-only opens change nothing.
    public init(path: String, mode: OpenMode = .readWrite,
                journal: JournalExport = .enabled, busyTimeout: Duration = .seconds(5)) throws(LedgerError) {
        let milliseconds = Int32(clamping: busyTimeout.components.seconds * 1000
                                     + busyTimeout.components.attoseconds / 1_000_000_000_000_000)
        if mode == .readWrite { try StateFiles.secure(ledgerPath: path, busyTimeoutMilliseconds: milliseconds) }
        let database = try SQLiteDatabase.open(path: path, readOnly: mode == .readOnly)
        try database.setBusyTimeout(milliseconds: milliseconds)
        let state = try Migrator.inspect(database)
        try Migrator.check(state, path: path)
        switch mode {
        case .readOnly:
            guard state.version == Schema.currentVersion else {
                throw .schemaOutdated(path: path, found: state.version, known: Schema.currentVersion)
            }
            try database.execute("PRAGMA query_only = ON")
        case .readWrite:
            // SQLite silently falls back to read-only when the OS refuses O_RDWR (immutable
            // file, read-only mount, root squash): say so now instead of on the first write.
            if database.isReadOnly {
                throw .readOnly(path: path, SQLiteFailure(code: SQLITE_READONLY,
                                                          message: "the operating system refused write access"))
            }
            // WAL: readers (status queries) never block the broker's writes, and FULL makes
            // every committed decision survive a power cut.
            let journalMode = try database.text("PRAGMA journal_mode = WAL")
            guard journalMode == "wal" else {
                throw .sqlite(path: path, operation: "enabling WAL",
                              SQLiteFailure(code: SQLITE_ERROR, message: "journal_mode stayed \(journalMode ?? "unknown")"))
            }
            try database.persistWAL()
            try database.execute("PRAGMA synchronous = FULL")
            try database.execute("PRAGMA foreign_keys = ON")
            if state.version < Schema.currentVersion { try Migrator.migrate(database) }
        }
        if mode == .readWrite {
            let reader = try SQLiteDatabase.open(path: path, readOnly: false)
            try reader.setBusyTimeout(milliseconds: milliseconds)
            try reader.persistWAL()
            try reader.execute("PRAGMA query_only = ON")
            // Maps the WAL index now, as the writer has: a first read must not depend on
            // opening files later.
            _ = try reader.integer("SELECT count(*) FROM sqlite_master")
            self.readConnection = Mutex(reader)
        } else {
            self.readConnection = nil
        }
        self.path = path
        self.mode = mode
        self.storesCheckpoints = Atomic(mode == .readWrite)
        self.journal = journal
        self.connection = Mutex(database)
    }

    /// Opens `<directory>/ledger.db`; read-write, it creates the directory (mode 0700,
    /// missing parents 0755) when missing.
    public convenience init(stateDirectory: String, mode: OpenMode = .readWrite,
                            journal: JournalExport = .enabled, busyTimeout: Duration = .seconds(5)) throws(LedgerError) {
        if mode == .readWrite { try StateFiles.createDirectory(stateDirectory) }
        try self.init(path: stateDirectory + "/" + Ledger.fileName, mode: mode, journal: journal, busyTimeout: busyTimeout)
    }

    /// The state directory of the one writer (devaccessd, `--offline`): created 0700 when
    /// missing (parents 0755), and refused when it is a symlink or belongs to another user,
    /// who could plant a ledger in it or take its engine lock.
    public static func prepareStateDirectory(_ path: String) throws(LedgerError) {
        try StateFiles.createDirectory(path)
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw .stateDirectoryCall(path: path, .current("lstat", path: path))
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw .stateDirectory(path: path, reason: "it is not a directory (a symlink?); refusing it")
        }
        guard info.st_uid == geteuid() else {
            throw .stateDirectory(path: path, reason: "it belongs to uid \(info.st_uid), not to uid \(geteuid()); "
                + "use a directory only this user owns")
        }
    }

    /// The schema version stored in the file.
    public func storedSchemaVersion() throws(LedgerError) -> Int32 {
        try read { db throws(LedgerError) in Int32(truncatingIfNeeded: try db.integer("PRAGMA user_version") ?? 0) }
    }

    // MARK: - Transactions

    /// Runs `body` on the connection outside any transaction (ATTACH and DETACH need that).
    func withConnection<R: Sendable>(_ body: (borrowing SQLiteDatabase) throws(LedgerError) -> R) throws(LedgerError) -> R {
        try connection.withLock { (database: inout sending SQLiteDatabase) throws(LedgerError) -> sending R in
            try body(database)
        }
    }

    /// Runs `body` in a read transaction: one consistent snapshot, even while another
    /// process writes.
    func read<R: Sendable>(_ body: (borrowing SQLiteDatabase) throws(LedgerError) -> R) throws(LedgerError) -> R {
        switch readConnection {
        case .some(let reader):
            return try Self.transaction(on: reader, body)
        case .none:
            return try Self.transaction(on: connection, body)
        }
    }

    private static func transaction<R: Sendable>(on connection: borrowing Mutex<SQLiteDatabase>,
                                                 _ body: (borrowing SQLiteDatabase) throws(LedgerError) -> R)
        throws(LedgerError) -> R
    {
        try connection.withLock { (database: inout sending SQLiteDatabase) throws(LedgerError) -> sending R in
            try database.transaction(immediate: false, body)
        }
    }

    /// Runs `body` in a write transaction with an audit writer; the rows and the events
    /// it appends commit together or not at all. Events go to the journal after commit.
    func write<R: Sendable>(_ body: (borrowing SQLiteDatabase, inout AuditWriter) throws(LedgerError) -> R)
        throws(LedgerError) -> R
    {
        guard mode == .readWrite else { throw .readOnly(path: path, nil) }
        let keep = journal == .enabled
        let (result, recorded, appended) = try connection.withLock {
            (database: inout sending SQLiteDatabase) throws(LedgerError) -> sending (R, [RecordedAuditEvent], Int64?) in
            try database.transaction(immediate: true) { db throws(LedgerError) in
                var writer = try AuditWriter(db, keepRecords: keep)
                let result = try body(db, &writer)
                try writer.finish()
                return (result, writer.records, writer.firstSeq.map { _ in writer.lastSeq })
            }
        }
        if journal == .enabled { JournalExporter.send(recorded) }
        if let appended { appends.appended(through: appended) }
        commits.committed()
        return result
    }
}
