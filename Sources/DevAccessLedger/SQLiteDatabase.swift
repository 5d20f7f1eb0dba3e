import CSQLite

/// One open SQLite connection, closed when its owner goes away.
///
/// `@unchecked Sendable` because ownership, not sharing, crosses threads: the value is
/// noncopyable, so exactly one owner (the `Ledger`'s mutex) holds it, and SQLite's
/// multi-thread mode (`NOMUTEX`) allows a connection on any thread, one at a time.
struct SQLiteDatabase: ~Copyable, @unchecked Sendable {
    let handle: OpaquePointer
    let path: String

    /// Opens (or, writable, creates) `path`. `SQLITE_OPEN_NOFOLLOW` refuses a symlink
    /// planted in place of the ledger; `EXRESCODE` keeps the extended result codes.
    static func open(path: String, readOnly: Bool) throws(LedgerError) -> SQLiteDatabase {
        try open(filename: path, path: path,
                 flags: readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
    }

    /// Opens `filename` (a path, or a `file:` URI when `flags` has `SQLITE_OPEN_URI`) with
    /// `flags` besides the ones above; errors name `path`.
    static func open(filename: String, path: String, flags: Int32) throws(LedgerError) -> SQLiteDatabase {
        let flags = flags | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE
        var raw: OpaquePointer?
        let rc = sqlite3_open_v2(filename, &raw, flags, nil)
        guard rc == SQLITE_OK, let handle = raw else {
            let failure = SQLiteFailure(code: rc, message: raw.map { String(cString: sqlite3_errmsg($0)) }
                                        ?? String(cString: sqlite3_errstr(rc)))
            sqlite3_close_v2(raw)
            throw LedgerError.classify(failure, path: path, operation: "open")
        }
        return SQLiteDatabase(handle: handle, path: path)
    }

    private init(handle: OpaquePointer, path: String) {
        self.handle = handle
        self.path = path
    }

    deinit {
        // close_v2 defers the close until every statement is finalized, so it cannot fail on a leak.
        sqlite3_close_v2(handle)
    }

    /// The last failure on this connection.
    func failure(_ rc: Int32) -> SQLiteFailure {
        let code = sqlite3_extended_errcode(handle)
        return SQLiteFailure(code: code == SQLITE_OK ? rc : code, message: String(cString: sqlite3_errmsg(handle)))
    }

    func error(_ rc: Int32, _ operation: String) -> LedgerError {
        LedgerError.classify(failure(rc), path: path, operation: operation)
    }

    /// Runs SQL without results (DDL, pragmas, transaction control).
    func execute(_ sql: String) throws(LedgerError) {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc, "executing \(sql.prefix(60))") }
    }

    func prepare(_ sql: String) throws(LedgerError) -> SQLiteStatement {
        try SQLiteStatement(sql, database: handle, path: path)
    }

    /// The first column of the first row of a query, as an integer.
    func integer(_ sql: String) throws(LedgerError) -> Int64? {
        let statement = try prepare(sql)
        guard try statement.step() else { return nil }
        return statement.int64(0)
    }

    func text(_ sql: String) throws(LedgerError) -> String? {
        let statement = try prepare(sql)
        guard try statement.step() else { return nil }
        return statement.text(0)
    }

    func setBusyTimeout(milliseconds: Int32) throws(LedgerError) {
        let rc = sqlite3_busy_timeout(handle, milliseconds)
        guard rc == SQLITE_OK else { throw error(rc, "setting the busy timeout") }
    }

    /// Keeps the -wal and -shm files when the last writer closes. Without them a read-only
    /// open must create them, which fails for a reader that may not write the directory
    /// (or on a read-only mount), so read-only queries would break whenever the broker is
    /// stopped. Kept, they are also checked by the next read-write open (`StateFiles`).
    func persistWAL() throws(LedgerError) {
        var on: Int32 = 1
        let rc = sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &on)
        guard rc == SQLITE_OK else { throw error(rc, "keeping the WAL files") }
    }

    /// True when SQLite opened the file read-only although write access was asked for
    /// (it falls back silently when the OS refuses `O_RDWR`, e.g. an immutable file).
    var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    /// Runs `body` in one transaction: all of it is committed, or nothing.
    /// `immediate` takes the write lock at once, so two writers never deadlock upgrading.
    func transaction<R>(immediate: Bool, _ body: (borrowing SQLiteDatabase) throws(LedgerError) -> R)
        throws(LedgerError) -> R
    {
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        let result: R
        do {
            result = try body(self)
        } catch {
            // The failure that matters is the body's; a failed rollback leaves SQLite to
            // roll back when the connection closes.
            _ = sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            throw error
        }
        do {
            try execute("COMMIT")
        } catch {
            _ = sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            throw error
        }
        return result
    }
}

extension SQLiteDatabase {
    /// The rowid of the last INSERT on this connection.
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

extension SQLiteDatabase {
    /// Rows changed by the last INSERT, UPDATE or DELETE on this connection.
    var changes: Int32 { sqlite3_changes(handle) }
}
