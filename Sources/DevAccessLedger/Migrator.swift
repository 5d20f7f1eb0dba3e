/// Checks what an opened file is and brings it to the schema this code knows.
/// Every check that can refuse runs before anything is written.
enum Migrator {
    struct FileState {
        var version: Int32
        var applicationID: Int32
        var tableCount: Int64
    }

    /// Reads the header fields. Garbage bytes fail here with `SQLITE_NOTADB`.
    static func inspect(_ db: borrowing SQLiteDatabase) throws(LedgerError) -> FileState {
        let version = try db.integer("PRAGMA user_version") ?? 0
        let applicationID = try db.integer("PRAGMA application_id") ?? 0
        let tables = try db.integer("SELECT count(*) FROM sqlite_master WHERE type = 'table'") ?? 0
        return FileState(version: Int32(truncatingIfNeeded: version),
                         applicationID: Int32(truncatingIfNeeded: applicationID), tableCount: tables)
    }

    /// Refuses files that are not ours or that a newer devaccess wrote.
    static func check(_ state: FileState, path: String, known: Int32 = Schema.currentVersion) throws(LedgerError) {
        if state.applicationID != 0 && state.applicationID != Schema.applicationID {
            throw .notALedger(path: path, reason: "its application_id is \(state.applicationID)")
        }
        if state.version > known {
            throw .schemaTooNew(path: path, found: state.version, known: known)
        }
        if state.version < 0 || (state.version == 0 && state.tableCount > 0) {
            throw .notALedger(path: path, reason: "it has \(state.tableCount) tables but no devaccess schema version")
        }
    }

    /// Applies every migration above the file's version up to `target`, all in one
    /// transaction. The version is re-read under the write lock, so two processes
    /// opening the same old file migrate it once.
    static func migrate(_ db: borrowing SQLiteDatabase, to target: Int32 = Schema.currentVersion) throws(LedgerError) {
        try db.transaction(immediate: true) { db throws(LedgerError) in
            let state = try inspect(db)
            try check(state, path: db.path)
            for migration in Schema.migrations where migration.version > state.version && migration.version <= target {
                do throws(LedgerError) {
                    try db.execute(migration.sql)
                    try db.execute("PRAGMA user_version = \(migration.version)")
                } catch .sqlite(_, _, let failure) {
                    // Busy, full or read-only keep their own case: they say what to do.
                    throw .migrationFailed(path: db.path, toVersion: migration.version, failure)
                }
            }
        }
    }
}
