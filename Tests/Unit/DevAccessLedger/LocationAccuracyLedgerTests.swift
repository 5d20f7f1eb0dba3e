import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Location accuracy in the ledger (schema version 7)")
struct LocationAccuracyLedgerTests {
    /// A file exactly as version 6 left it, with grants, a pending request and chained
    /// events, opened by this code: migrated to 7, the rows kept without a level (a location
    /// grant from before is exact), the old chain still verifying and new events chaining on.
    @Test func versionSixMigratesWithRowsAndChainIntact() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try Migrator.migrate(db, to: 6)
            try db.execute("""
                INSERT INTO grants (subject_uid, user_name, permission, decision, scope, created_usec,
                                    decided_by_uid, decided_by_name, how, reason)
                VALUES (1000, 'alice', 'location', 'allow', 'always', 1700000000000000, 0, 'root', 'admin', 'maps'),
                       (1000, 'alice', 'camera', 'allow', 'always', 1700000001000000, 0, 'root', 'admin', '');
                INSERT INTO pending_requests (subject_uid, user_name, permissions, reason, created_usec)
                VALUES (1001, 'bob', 'location', 'weather', 1700000002000000);
                """)
            try db.transaction(immediate: true) { db throws(LedgerError) in
                var writer = try AuditWriter(db, keepRecords: false)
                for n in 1...3 { try writer.append(sampleEvent(n)) }
                try writer.finish()
            }
            #expect(try db.integer("PRAGMA user_version") == 6)
        }
        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        #expect(try ledger.verify() == .intact(count: 3))
        let old = try ledger.grants(includeInactive: true)
        let location = try #require(old.first { $0.permission == .location })
        #expect(location.accuracy == nil && location.locationLevel == .exact && location.reason == "maps")
        #expect(old.first { $0.permission == .camera }?.locationLevel == nil)
        let waiting = try #require(try ledger.pendingRequests().first)
        #expect(waiting.accuracy == nil && waiting.locationLevel == .exact)

        let city = try ledger.recordGrant(NewGrant(subject: bob, permission: .location, decision: .allow,
                                                   scope: .always, decidedBy: rootUser, method: .admin,
                                                   accuracy: .city))
        #expect(city.accuracy == .city && city.locationLevel == .city)
        #expect(try ledger.grants(uid: bob.uid).first?.accuracy == .city)
        // The level is in the grant's audit event, so the chain covers it.
        let event = try #require(try ledger.events().last)
        #expect(event.event.details["accuracy"] == "city" && event.event.type == .grant)
        #expect(try ledger.verify() == .intact(count: 4))
    }

    /// Changing a recorded level afterwards by hand is seen: the audit event that recorded
    /// the grant says the level it was given, and that event is hash-chained.
    @Test func editedLevelContradictsTheChainedEvent() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let grant = try ledger.recordGrant(NewGrant(subject: alice, permission: .location, decision: .allow,
                                                    scope: .always, decidedBy: rootUser, method: .admin,
                                                    accuracy: .city))
        try rawSQL(dir.ledgerPath, "UPDATE grants SET accuracy = 'exact' WHERE id = \(grant.id)")
        #expect(try ledger.grants(uid: alice.uid).first?.accuracy == .exact)
        #expect(try ledger.events().last?.event.details["accuracy"] == "city")
        // Rewriting the event's details as well breaks the chain.
        try rawSQL(dir.ledgerPath, """
            UPDATE audit_events SET details = replace(details, '"city"', '"exact"') WHERE seq = 1
            """)
        #expect(try !ledger.verify().isIntact)
    }

    @Test func levelsOnlyWhereTheyMeanSomething() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        #expect(throws: LedgerError.invalidArgument("an accuracy goes with location only, not camera")) {
            try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                            decidedBy: rootUser, method: .admin, accuracy: .city))
        }
        #expect(throws: LedgerError.self) {
            try ledger.recordGrant(NewGrant(subject: alice, permission: .location, decision: .deny, scope: .always,
                                            decidedBy: rootUser, method: .admin, accuracy: .city))
        }
        #expect(throws: LedgerError.self) {
            try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera], accuracy: .street))
        }
        // The column refuses a word that is not a level, even written around the API.
        #expect(throws: (any Error).self) {
            try rawSQL(dir.ledgerPath, """
                INSERT INTO grants (subject_uid, user_name, permission, decision, scope, created_usec,
                                    decided_by_uid, decided_by_name, how, accuracy)
                VALUES (1000, 'alice', 'location', 'allow', 'always', 1, 0, 'root', 'admin', 'precise')
                """)
        }
        #expect(try ledger.grants(includeInactive: true).isEmpty)
        let queued = try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera, .location],
                                                               accuracy: .neighborhood))
        #expect(try ledger.pendingRequest(id: queued.id)?.accuracy == .neighborhood)
        #expect(try ledger.events().last?.event.details["accuracy"] == "neighborhood")
    }
}
