import Foundation
import Glibc
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Schema, migrations and refusals")
struct SchemaTests {
    @Test func freshLedgerIsCurrentWALAndFull() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        #expect(Ledger.schemaVersion == 8)
        #expect(try ledger.read { db throws(LedgerError) in try db.text("PRAGMA journal_mode") } == "wal")
        #expect(try ledger.read { db throws(LedgerError) in try db.integer("PRAGMA synchronous") } == 2)
        #expect(try ledger.read { db throws(LedgerError) in try db.integer("PRAGMA application_id") }
                    == Int64(Schema.applicationID))
    }

    /// Builds a database exactly as version 1 left it, with rows, then opens it with this code.
    @Test func versionOneMigratesWithRowsIntact() throws {
        let dir = TemporaryLedgerDirectory()
        let events = (1...3).map { sampleEvent($0) }.map { event -> AuditEvent in
            var v1 = event
            v1.deviceName = nil  // version 1 had no device_name column
            return v1
        }
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try Migrator.migrate(db, to: 1)
            try db.execute("""
                INSERT INTO grants (subject_uid, user_name, permission, decision, scope, created_usec,
                                    decided_by_uid, decided_by_name, how, reason)
                VALUES (1000, 'alice', 'camera', 'allow', 'always', 1700000000000000, 1000, 'alice', 'consent', 'video calls'),
                       (1001, 'bob', 'microphone', 'deny', 'always', 1700000001000000, 0, 'root', 'admin', '');
                """)
            let hasher = try SHA256Hasher()
            var prev = Schema.genesisHash
            for (index, event) in events.enumerated() {
                let seq = Int64(index + 1)
                let details = DetailsJSON.encode(event.details)
                let time = try Timestamp.microseconds(event.time)
                let canonical = CanonicalEvent(seq: seq, timeUsec: time, event: event, detailsJSON: details)
                let hash = try hasher.chainHash(previous: try #require(Hex.decode(prev.utf8)), canonical: canonical.bytes)
                let insert = try db.prepare("""
                    INSERT INTO audit_events (seq, time_usec, type, actor_uid, actor_name, subject_uid, subject_name,
                        permission, device_id, program, node_path, details, prev_hash, hash)
                    VALUES (?, ?, ?, 1000, 'alice', 1000, 'alice', 'camera', ?, ?, ?, ?, ?, ?)
                    """)
                try insert.run([.integer(seq), .integer(time), .text(event.type.rawValue), .optional(event.deviceID),
                                .optional(event.program), .optional(event.nodePath), .text(details), .text(prev), .text(hash)])
                prev = hash
            }
            #expect(try db.integer("PRAGMA user_version") == 1)
            #expect(try db.integer("SELECT count(*) FROM sqlite_master WHERE name = 'acl_entries'") == 0)
        }

        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        let grants = try ledger.grants(includeInactive: true)
        #expect(grants.count == 2)
        #expect(grants.contains { $0.subject == alice && $0.permission == .camera && $0.decision == .allow
                                  && $0.reason == "video calls" && $0.method == .consent })
        #expect(grants.contains { $0.subject == bob && $0.decision == .deny && $0.decidedBy == rootUser })
        #expect(try ledger.events().map(\.event) == events)
        // The old events still verify, and new ones chain onto them.
        #expect(try ledger.verify() == .intact(count: 3))
        #expect(try ledger.append(sampleEvent(4)).seq == 4)
        #expect(try ledger.verify() == .intact(count: 4))
        let entry = try ledger.recordACLEntryAdded(
            NewACLEntry(nodePath: "/dev/video0", deviceID: "cam", major: 81, minor: 0, qualifier: .user(1000)),
            by: rootUser)
        #expect(try ledger.aclEntries(deviceID: "cam") == [entry])
    }

    @Test func newerSchemaIsRefusedAndFileUntouched() throws {
        let dir = TemporaryLedgerDirectory()
        try rawSQL(dir.ledgerPath, "CREATE TABLE future (x); PRAGMA application_id = \(Schema.applicationID); PRAGMA user_version = 9")
        let before = try FileSnapshot(dir.ledgerPath)
        let entriesBefore = directoryEntries(dir.path)
        #expect(throws: LedgerError.schemaTooNew(path: dir.ledgerPath, found: 9, known: 8)) {
            try openLedger(dir)
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
        #expect(directoryEntries(dir.path) == entriesBefore)
        let message = LedgerError.schemaTooNew(path: dir.ledgerPath, found: 9, known: 8).description
        #expect(message.hasPrefix("ledger schema version 9 is newer than this devaccess (knows 8); upgrade devaccess"))
    }

    @Test func corruptFileIsNamedAndUntouched() throws {
        let dir = TemporaryLedgerDirectory()
        var garbage = [UInt8](repeating: 0, count: 8192)
        for index in garbage.indices { garbage[index] = UInt8.random(in: 0...255) }
        try Data(garbage).write(to: URL(fileURLWithPath: dir.ledgerPath))
        let before = try FileSnapshot(dir.ledgerPath)
        do throws(LedgerError) {
            _ = try openLedger(dir)
            Issue.record("a garbage file opened as a ledger")
        } catch {
            guard case .corrupt(let path, let failure) = error else {
                Issue.record("expected .corrupt, got \(error)")
                return
            }
            #expect(path == dir.ledgerPath)
            #expect(failure.primaryCode == 26)  // SQLITE_NOTADB
            #expect(error.description.contains(dir.ledgerPath))
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
        #expect(directoryEntries(dir.path) == ["ledger.db"])
    }

    @Test func foreignDatabaseIsRefused() throws {
        let dir = TemporaryLedgerDirectory()
        try rawSQL(dir.ledgerPath, "CREATE TABLE photos (id INTEGER)")
        #expect {
            try openLedger(dir)
        } throws: { error in
            if case .notALedger(dir.ledgerPath, _) = error as? LedgerError { return true }
            return false
        }
    }

    @Test func readOnlyModeReadsButNeverWrites() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let writer = try openLedger(dir)
            try writer.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                            decidedBy: alice, method: .consent))
        }
        let before = try FileSnapshot(dir.ledgerPath)
        let reader = try openLedger(dir, mode: .readOnly)
        #expect(try reader.activeGrants(uid: alice.uid, permission: .camera).count == 1)
        #expect(try reader.verify() == .intact(count: 1))
        #expect(throws: LedgerError.readOnly(path: dir.ledgerPath, nil)) {
            try reader.append(sampleEvent(1))
        }
        #expect(throws: LedgerError.readOnly(path: dir.ledgerPath, nil)) {
            try reader.revoke(permission: .camera, uid: alice.uid, by: rootUser)
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
    }

    @Test func readOnlyModeRefusesMissingAndOldFiles() throws {
        let dir = TemporaryLedgerDirectory()
        #expect {
            try openLedger(dir, mode: .readOnly)
        } throws: { error in
            if case .cannotOpen(dir.ledgerPath, _) = error as? LedgerError { return true }
            return false
        }
        #expect(!FileManager.default.fileExists(atPath: dir.ledgerPath))
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try Migrator.migrate(db, to: 1)
        }
        #expect(throws: LedgerError.schemaOutdated(path: dir.ledgerPath, found: 1, known: 8)) {
            try openLedger(dir, mode: .readOnly)
        }
    }

    /// Root ignores permission bits, so the file is made immutable (`chattr +i`), which
    /// stops root too: SQLite's O_RDWR open fails with EPERM and it falls back to read-only.
    @Test(.enabled(if: getuid() == 0, "chattr needs CAP_LINUX_IMMUTABLE"))
    func immutableFileIsReportedReadOnly() throws {
        let dir = TemporaryLedgerDirectory()
        _ = try openLedger(dir)  // created, then closed
        let before = try FileSnapshot(dir.ledgerPath)
        try chattr("+i", dir.ledgerPath)
        defer { try? chattr("-i", dir.ledgerPath) }
        do throws(LedgerError) {
            _ = try openLedger(dir)
            Issue.record("an immutable ledger opened for writing")
        } catch {
            guard case .readOnly(dir.ledgerPath, let failure?) = error else {
                Issue.record("expected .readOnly with a failure, got \(error)")
                return
            }
            #expect(failure.primaryCode == 8)
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
    }

    /// An immutable directory: no new ledger (nor journal files) can be created in it.
    @Test(.enabled(if: getuid() == 0, "chattr needs CAP_LINUX_IMMUTABLE"))
    func immutableDirectoryCannotHoldANewLedger() throws {
        let dir = TemporaryLedgerDirectory()
        try chattr("+i", dir.path)
        defer { try? chattr("-i", dir.path) }
        #expect {
            try openLedger(dir)
        } throws: { error in
            if case .cannotOpen(dir.ledgerPath, _) = error as? LedgerError { return true }
            return false
        }
        #expect(directoryEntries(dir.path).isEmpty)
    }

    @Test func stateDirectoryHonoursTheEnvironment() throws {
        #expect(Ledger.stateDirectory(environment: ["DEVACCESS_STATE_DIR": "/tmp/x"]) == "/tmp/x")
        #expect(Ledger.stateDirectory(environment: ["DEVACCESS_STATE_DIR": ""]) == "/var/lib/devaccess")
        #expect(Ledger.stateDirectory(environment: [:]) == "/var/lib/devaccess")
        let dir = TemporaryLedgerDirectory()
        let nested = dir.path + "/state/devaccess"
        let ledger = try Ledger(stateDirectory: nested, journal: .disabled)
        #expect(ledger.path == nested + "/ledger.db")
        #expect(FileManager.default.fileExists(atPath: ledger.path))
    }

    private func chattr(_ flag: String, _ path: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [flag, path]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw CocoaError(.fileWriteNoPermission) }
    }
}

/// The WAL files outlive the writer, so a read-only reader need not create them. Only the
/// owner reads the ledger, though: an unprivileged reader is refused (it used to be served
/// from a 0644 file; see StatePrivacyTests).
@Suite("Read-only access after the writer closes")
struct UnprivilegedReadTests {
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3")
                   && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
                   "needs root, setpriv and the sqlite3 CLI"))
    func readableOnlyByTheOwnerAfterTheWriterCloses() throws {
        let dir = TemporaryLedgerDirectory()
        chmod(dir.path, 0o755)
        do {
            let ledger = try openLedger(dir)
            try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                            decidedBy: alice, method: .consent))
        }
        // The WAL files outlive the writer, so a reader need not create them.
        #expect(directoryEntries(dir.path) == ["ledger.db", "ledger.db-shm", "ledger.db-wal"])
        let select = ["/usr/bin/sqlite3", "-readonly", dir.ledgerPath, "SELECT user_name FROM grants"]
        let byNobody = try run("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"] + select)
        #expect(byNobody.status != 0, "sqlite3 as nobody read the ledger: \(byNobody.text)")
        #expect(byNobody.text.contains("unable to open database"), "\(byNobody.text)")
        let byRoot = try run(select[0], Array(select.dropFirst()))
        #expect(byRoot.status == 0, "sqlite3 as root: \(byRoot.text)")
        #expect(byRoot.text == "alice\n")
    }

    private func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, text: String) {
        let process = Process()
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return (process.terminationStatus, text)
    }
}
