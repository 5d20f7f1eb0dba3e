import CSQLite

/// A value bound to a statement parameter.
enum SQLValue {
    case integer(Int64)
    case text(String)
    case null

    static func optional(_ value: String?) -> SQLValue { value.map { .text($0) } ?? .null }
    static func optional(_ value: Int64?) -> SQLValue { value.map { .integer($0) } ?? .null }
    static func uid(_ value: UInt32?) -> SQLValue { value.map { .integer(Int64($0)) } ?? .null }
}

/// A prepared statement, finalized when its owner goes away. Lives no longer than the
/// `SQLiteDatabase` borrow it was prepared in.
struct SQLiteStatement: ~Copyable {
    private let handle: OpaquePointer
    private let database: OpaquePointer
    private let path: String

    init(_ sql: String, database: OpaquePointer, path: String) throws(LedgerError) {
        var raw: OpaquePointer?
        let rc = sqlite3_prepare_v2(database, sql, -1, &raw, nil)
        guard rc == SQLITE_OK, let handle = raw else {
            let failure = SQLiteFailure(code: sqlite3_extended_errcode(database),
                                        message: String(cString: sqlite3_errmsg(database)))
            throw LedgerError.classify(failure, path: path, operation: "preparing \(sql.prefix(60))")
        }
        self.handle = handle
        self.database = database
        self.path = path
    }

    deinit { sqlite3_finalize(handle) }

    private func error(_ rc: Int32, _ operation: String) -> LedgerError {
        let code = sqlite3_extended_errcode(database)
        let failure = SQLiteFailure(code: code == SQLITE_OK ? rc : code,
                                    message: String(cString: sqlite3_errmsg(database)))
        return LedgerError.classify(failure, path: path, operation: operation)
    }

    /// Resets the statement and binds `values` to parameters 1...n.
    func bind(_ values: [SQLValue]) throws(LedgerError) {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .integer(let number):
                rc = sqlite3_bind_int64(handle, index, number)
            case .null:
                rc = sqlite3_bind_null(handle, index)
            case .text(let string):
                // Bound with an explicit length so the bytes are stored exactly (the hash
                // chain is computed over them).
                var copy = string
                rc = copy.withUTF8 { bytes -> Int32 in
                    let length = sqlite3_uint64(bytes.count)
                    guard let base = bytes.baseAddress else {
                        return sqlite3_bind_text64(handle, index, "", 0, devaccess_sqlite_transient(), UInt8(SQLITE_UTF8))
                    }
                    return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                        sqlite3_bind_text64(handle, index, $0, length, devaccess_sqlite_transient(), UInt8(SQLITE_UTF8))
                    }
                }
            }
            guard rc == SQLITE_OK else { throw error(rc, "binding parameter \(index)") }
        }
    }

    /// Advances; true when a row is available.
    func step() throws(LedgerError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let sql = sqlite3_sql(handle).map { String(cString: $0) } ?? "a statement"
            let failure = error(rc, "running \(sql.prefix(60))")
            sqlite3_reset(handle)
            throw failure
        }
    }

    /// Binds, runs to completion and resets: for INSERT/UPDATE/DELETE.
    func run(_ values: [SQLValue]) throws(LedgerError) {
        try bind(values)
        while try step() {}
        sqlite3_reset(handle)
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    func int64(_ column: Int32) -> Int64? {
        isNull(column) ? nil : sqlite3_column_int64(handle, column)
    }

    func text(_ column: Int32) -> String? {
        guard let bytes = bytes(column) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The stored bytes of a text column, unrepaired (invalid UTF-8 stays invalid).
    func bytes(_ column: Int32) -> [UInt8]? {
        if isNull(column) { return nil }
        let pointer = sqlite3_column_text(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        guard let pointer, count > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: pointer, count: count))
    }

    /// The stored bytes of a text column, lent to `body` without a copy (nil: NULL); valid
    /// only until the next step. For scans that look at a million rows.
    func withBytes<Result>(_ column: Int32, _ body: (UnsafeBufferPointer<UInt8>?) -> Result) -> Result {
        if isNull(column) { return body(nil) }
        let pointer = sqlite3_column_text(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        return body(UnsafeBufferPointer(start: count > 0 ? pointer : nil, count: pointer == nil ? 0 : count))
    }

    /// Whether the column holds an integer (not text that merely converts to one).
    func isInteger(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_INTEGER }
}
