import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Pending requests (schema version 3)")
struct PendingRequestTests {
    /// A version-3 file's queue survives the move to version 4 (process-bound once grants,
    /// declined requests): rows, their resolution and the chain; and 4 stores what 3 could not.
    @Test func versionThreeQueueSurvivesVersionFour() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try Migrator.migrate(db, to: 3)
            try db.execute("""
                INSERT INTO pending_requests (subject_uid, user_name, permissions, scope, duration_sec, reason,
                                              created_usec, resolved_usec, resolution, resolved_by_uid, resolved_by_name)
                VALUES (1000, 'alice', 'camera microphone', 'for', 600, 'lab', 1700000000000000, 1700000001000000,
                        'rejected', 0, 'root'),
                       (1000, 'alice', 'camera', NULL, NULL, '', 1700000002000000, NULL, NULL, NULL, NULL);
                """)
        }
        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        let all = try ledger.pendingRequests(includeResolved: true)
        #expect(all.map(\.id) == [1, 2])
        #expect(all.first?.resolution == .rejected && all.first?.scope == .duration(seconds: 600))
        #expect(all.first?.permissions == [.camera, .microphone] && all.first?.holder == nil)
        let declined = try ledger.resolvePendingRequest(id: 2, as: .declined, by: Principal(uid: 0, name: "root"))
        #expect(declined.resolution == .declined)
        let holder = ProcessHolder(pid: 4242, startTicks: 99, bootID: "b")
        let queued = try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera], scope: .once,
                                                               holder: holder))
        #expect(try ledger.pendingRequest(id: queued.id)?.holder == holder)
        let grant = try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .once,
                                                    decidedBy: alice, method: .consent, holder: holder))
        #expect(grant.holder == holder && grant.expires == nil)
        #expect(throws: LedgerError.self) {
            try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                            decidedBy: alice, method: .consent, holder: holder))
        }
        #expect(try ledger.verify().isIntact)
    }

    /// An approval is one transaction: the grant it replaces ended, the new grant and the
    /// request's resolution all written together; a request resolved meanwhile is refused
    /// with nothing written, so no grant ever stands beside a request still waiting.
    @Test func anApprovalWritesItsGrantsAndTheResolutionTogetherOrNothing() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let root = Principal(uid: 0, name: "root")
        let old = try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                                  decidedBy: root, method: .admin))
        let queued = try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera, .microphone],
                                                               scope: .always))
        let decisions = [Permission.camera, .microphone].map { permission in
            ResolutionDecision(grant: NewGrant(subject: alice, permission: permission, decision: .allow, scope: .always,
                                               decidedBy: root, method: .admin, reason: "approved request \(queued.id)"),
                               ends: permission == .camera ? [old.id] : [])
        }
        let (request, recorded) = try ledger.recordResolution(queued.id, as: .approved, decisions: decisions, by: root)
        #expect(request.resolution == .approved)
        #expect(recorded.map(\.grant.permission) == [.camera, .microphone])
        #expect(recorded.first?.ended.map(\.id) == [old.id])
        #expect(try ledger.grants(uid: alice.uid).map(\.id).sorted() == recorded.map(\.grant.id).sorted())

        // Resolved already: refused, and neither grants nor events are written.
        let events = try ledger.eventCount()
        let again = ResolutionDecision(grant: NewGrant(subject: alice, permission: .camera, decision: .allow,
                                                       scope: .always, decidedBy: root, method: .admin), ends: [])
        #expect(throws: LedgerError.self) {
            try ledger.recordResolution(queued.id, as: .approved, decisions: [again], by: root)
        }
        #expect(try ledger.grants(uid: alice.uid, includeInactive: true).count == 3)
        #expect(try ledger.eventCount() == events)
        #expect(try ledger.verify().isIntact)
    }

    /// A file exactly as version 2 left it, with a grant, an ACL entry record and chained
    /// events, opened by this code: migrated to 3, everything kept, the chain intact.
    @Test func versionTwoMigratesWithRowsIntact() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try Migrator.migrate(db, to: 2)
            #expect(try db.integer("PRAGMA user_version") == 2)
            #expect(try db.integer("SELECT count(*) FROM sqlite_master WHERE name = 'pending_requests'") == 0)
        }
        do {
            // Rows written through the API of a version-2 file (the API only needs v2 tables).
            let v2 = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: false)
            try v2.execute("""
                INSERT INTO grants (subject_uid, user_name, permission, decision, scope, created_usec,
                                    decided_by_uid, decided_by_name, how, reason)
                VALUES (1000, 'alice', 'camera', 'allow', 'always', 1700000000000000, 0, 'root', 'admin', 'lab');
                INSERT INTO acl_entries (node_path, device_id, major, minor, uid, permissions, grant_id, created_usec)
                VALUES ('/dev/video0', 'cam', 81, 0, 1000, 'rw-', 1, 1700000000000000);
                """)
        }
        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        let grants = try ledger.grants(includeInactive: true)
        #expect(grants.count == 1 && grants.first?.reason == "lab" && grants.first?.method == .admin)
        #expect(try ledger.aclEntries(deviceID: "cam").count == 1)
        #expect(try ledger.pendingRequests().isEmpty)
        // The new table works on the migrated file, and its events chain on.
        let queued = try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera]))
        #expect(queued.id == 1)
        #expect(try ledger.verify().isIntact)
        // Opening again does not migrate twice.
        let again = try openLedger(dir)
        #expect(try again.storedSchemaVersion() == Ledger.schemaVersion)
        #expect(try again.pendingRequests().map(\.id) == [1])
    }

    @Test func queueListAndResolve() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try ledger.queueRequest(NewPendingRequest(
            subject: alice, program: "/usr/bin/cheese", permissions: [.camera, .microphone],
            scope: .duration(seconds: 3600), reason: "video call"), at: now)
        let second = try ledger.queueRequest(NewPendingRequest(subject: bob, permissions: [.location], scope: nil),
                                             at: now.addingTimeInterval(1))
        #expect(first.permissions == [.camera, .microphone])
        #expect(first.scope == .duration(seconds: 3600))
        #expect(first.program == "/usr/bin/cheese" && first.reason == "video call" && first.isWaiting)
        #expect(second.scope == nil)
        #expect(try ledger.pendingRequests().map(\.id) == [first.id, second.id], "oldest first")
        #expect(try ledger.pendingRequests(uid: bob.uid).map(\.id) == [second.id])

        // One approval_queued event per permission, with the request's terms.
        let queuedEvents = try ledger.events().filter { $0.event.type == .approvalQueued }
        #expect(queuedEvents.map { $0.event.permission } == [.camera, .microphone, .location])
        #expect(queuedEvents.first?.event.details["pending_id"] == String(first.id))
        #expect(queuedEvents.first?.event.details["duration_sec"] == "3600")
        #expect(queuedEvents.last?.event.details["scope"] == "default")

        let approved = try ledger.resolvePendingRequest(id: first.id, as: .approved, by: rootUser,
                                                        at: now.addingTimeInterval(5))
        #expect(approved.resolution == .approved && approved.resolvedBy == rootUser)
        #expect(try ledger.pendingRequests().map(\.id) == [second.id])
        #expect(try ledger.pendingRequest(id: first.id)?.resolution == .approved)
        #expect(try ledger.pendingRequests(includeResolved: true).count == 2)

        // A second resolution is refused and writes nothing.
        let count = try ledger.eventCount()
        #expect(throws: LedgerError.invalidArgument("request \(first.id) was already approved by root (0)")) {
            try ledger.resolvePendingRequest(id: first.id, as: .rejected, by: rootUser)
        }
        #expect(throws: LedgerError.invalidArgument("there is no pending request 99")) {
            try ledger.resolvePendingRequest(id: 99, as: .rejected, by: rootUser)
        }
        #expect(try ledger.eventCount() == count)
        let resolvedEvents = try ledger.events().filter { $0.event.details["stage"] == "approved" }
        #expect(resolvedEvents.count == 2 && resolvedEvents.allSatisfy { $0.event.actor == rootUser })
        #expect(try ledger.verify().isIntact)
    }

    @Test func badRequestsAreRefused() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        #expect(throws: LedgerError.self) { try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [])) }
        #expect(throws: LedgerError.self) {
            try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera, .camera]))
        }
        #expect(throws: LedgerError.self) {
            try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera], scope: .duration(seconds: 0)))
        }
        #expect(throws: LedgerError.self) {
            try ledger.queueRequest(NewPendingRequest(subject: alice, program: "relative", permissions: [.camera]))
        }
        #expect(try ledger.pendingRequests(includeResolved: true).isEmpty)
        #expect(try ledger.eventCount() == 0)
    }
}
