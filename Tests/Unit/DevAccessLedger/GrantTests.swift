import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Grants")
struct GrantTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)

    private func consent(_ subject: Principal, _ permission: Permission, _ decision: Decision = .allow,
                         scope: GrantTerm.Word = .always, expires: Date? = nil, device: String? = nil) -> NewGrant {
        NewGrant(subject: subject, program: nil, permission: permission, deviceID: device, decision: decision,
                 scope: scope, expires: expires, decidedBy: subject, method: .consent, reason: "asked")
    }

    @Test func recordListAndActive() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let always = try ledger.recordGrant(consent(alice, .camera), at: start)
        #expect(always.id > 0)
        #expect(always.created == start)
        #expect(always.isActive(at: start))
        let pinned = NewGrant(subject: alice, program: Program(path: "/usr/bin/cheese", sha256: String(repeating: "ab", count: 32)),
                              permission: .microphone, decision: .allow, scope: .duration,
                              expires: start.addingTimeInterval(3600), decidedBy: rootUser, method: .admin)
        let timed = try ledger.recordGrant(pinned, at: start)
        #expect(timed.program == pinned.program)
        #expect(timed.expires == start.addingTimeInterval(3600))
        try ledger.recordGrant(consent(bob, .camera, .deny), at: start)

        #expect(try ledger.grants(now: start).count == 3)
        #expect(try ledger.grants(uid: alice.uid, now: start).map(\.id).sorted() == [always.id, timed.id])
        #expect(try ledger.activeGrants(uid: bob.uid, permission: .camera, now: start).map(\.decision) == [.deny])
        // After the hour, the timed grant no longer stands but is still listed on request.
        let later = start.addingTimeInterval(3601)
        #expect(try ledger.activeGrants(uid: alice.uid, permission: .microphone, now: later).isEmpty)
        #expect(try ledger.grants(uid: alice.uid, includeInactive: true, now: later).count == 2)

        let types = try ledger.events().map(\.event.type)
        #expect(types == [.decision, .grant, .decision])
        let event = try #require(try ledger.events().first?.event)
        #expect(event.subject == alice && event.permission == .camera)
        #expect(event.details["grant_id"] == String(always.id))
        #expect(try ledger.verify() == .intact(count: 3))
    }

    @Test func revokeEndsAllowsOnly() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let cam0 = try ledger.recordGrant(consent(alice, .camera, device: "cam0"), at: start)
        let cam1 = try ledger.recordGrant(consent(alice, .camera, device: "cam1"), at: start)
        try ledger.recordGrant(consent(alice, .microphone, .deny), at: start)
        let later = start.addingTimeInterval(10)

        let first = try ledger.revoke(permission: .camera, uid: alice.uid, deviceID: "cam1", by: rootUser,
                                      reason: "left the team", at: later)
        #expect(first.map(\.id) == [cam1.id])
        #expect(first.first?.revoked == later)
        #expect(try ledger.activeGrants(uid: alice.uid, permission: .camera, now: later).map(\.id) == [cam0.id])
        #expect(try ledger.revoke(permission: .camera, uid: alice.uid, by: rootUser, at: later).map(\.id) == [cam0.id])
        #expect(try ledger.revoke(permission: .camera, uid: alice.uid, by: rootUser, at: later).isEmpty)
        #expect(try ledger.revoke(permission: .microphone, uid: alice.uid, by: rootUser, at: later).isEmpty)
        #expect(try ledger.activeGrants(uid: alice.uid, permission: .microphone, now: later).count == 1)

        let revokes = try ledger.events().filter { $0.event.type == .revoke }
        #expect(revokes.count == 2)
        #expect(revokes[0].event.actor == rootUser)
        #expect(revokes[0].event.details["revoke_reason"] == "left the team")
        #expect(try ledger.verify().isIntact)
    }

    @Test func resetForgetsDecisionsAndIsAudited() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let deny = try ledger.recordGrant(consent(alice, .camera, .deny), at: start)
        try ledger.recordGrant(consent(alice, .microphone), at: start)
        try ledger.recordGrant(consent(bob, .camera), at: start)

        let deleted = try ledger.reset(subject: alice, permission: .camera, by: rootUser, at: start)
        #expect(deleted.map(\.id) == [deny.id])
        #expect(try ledger.grants(uid: alice.uid, includeInactive: true).map(\.permission) == [.microphone])
        #expect(try ledger.reset(subject: alice, by: rootUser, at: start).count == 1)
        #expect(try ledger.grants(includeInactive: true).map(\.subject) == [bob])

        let resets = try ledger.events().filter { $0.event.type == .reset }
        #expect(resets.map { $0.event.details["deleted"] } == ["1", "1"])
        #expect(resets[0].event.details["grant_ids"] == String(deny.id))
        #expect(try ledger.verify() == .intact(count: 5))
    }

    @Test func expiryQueriesAndMarking() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let short = try ledger.recordGrant(consent(alice, .camera, scope: .duration, expires: start.addingTimeInterval(60)), at: start)
        let long = try ledger.recordGrant(consent(bob, .camera, scope: .duration, expires: start.addingTimeInterval(600)), at: start)
        try ledger.recordGrant(consent(alice, .location), at: start)

        #expect(try ledger.expiredUnrevoked(now: start.addingTimeInterval(59)).isEmpty)
        // Exactly at its expiry a grant no longer stands.
        #expect(try ledger.expiredUnrevoked(now: start.addingTimeInterval(60)).map(\.id) == [short.id])
        let much = start.addingTimeInterval(601)
        #expect(try ledger.expiredUnrevoked(now: much).map(\.id) == [short.id, long.id])

        // Not yet expired or unknown ids are skipped.
        #expect(try ledger.markExpired([long.id, 999], at: start.addingTimeInterval(100)).isEmpty)
        let ended = try ledger.markExpired([short.id, long.id], by: rootUser, at: much)
        #expect(ended.map(\.id) == [short.id, long.id])
        #expect(ended.allSatisfy { $0.revoked == much })
        #expect(try ledger.expiredUnrevoked(now: much).isEmpty)
        #expect(try ledger.markExpired([short.id], at: much).isEmpty)
        #expect(try ledger.events().filter { $0.event.type == .expiry }.count == 2)
    }

    @Test func invalidGrantsAreRefusedBeforeWriting() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        var grant = consent(alice, .camera, scope: .duration)
        #expect(throws: LedgerError.invalidArgument("scope 'until' needs an expiry time")) {
            try ledger.recordGrant(grant, at: start)
        }
        grant.scope = .always
        grant.expires = start.addingTimeInterval(5)
        #expect(throws: LedgerError.self) { try ledger.recordGrant(grant, at: start) }
        grant.scope = .duration
        grant.expires = start
        #expect(throws: LedgerError.invalidArgument("the expiry time is not in the future")) {
            try ledger.recordGrant(grant, at: start)
        }
        grant.expires = nil
        grant.scope = .always
        grant.program = Program(path: "/bin/x", sha256: "nothex")
        #expect(throws: LedgerError.self) { try ledger.recordGrant(grant, at: start) }
        grant.program = Program(path: "relative/x")
        #expect(throws: LedgerError.self) { try ledger.recordGrant(grant, at: start) }
        #expect(try ledger.grants(includeInactive: true).isEmpty)
        #expect(try ledger.eventCount() == 0)
    }

    @Test func handEditedRowIsReportedNotGuessed() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let grant = try ledger.recordGrant(consent(alice, .camera), at: start)
        try rawSQL(dir.ledgerPath, "PRAGMA ignore_check_constraints = ON; UPDATE grants SET decision = 'maybe'")
        #expect(throws: LedgerError.invalidRow(path: dir.ledgerPath, table: "grants", rowID: grant.id,
                                               problem: "decision is not allow/deny")) {
            try ledger.grants()
        }
    }

    @Test func aclEntryRecords() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let grant = try ledger.recordGrant(consent(alice, .camera), at: start)
        let userEntry = try ledger.recordACLEntryAdded(
            NewACLEntry(nodePath: "/dev/video0", deviceID: "cam0", major: 81, minor: 0, qualifier: .user(alice.uid),
                        grantID: grant.id),
            by: rootUser, subject: alice, permission: .camera, deviceName: "Integrated Camera", at: start)
        let groupEntry = try ledger.recordACLEntryAdded(
            NewACLEntry(nodePath: "/dev/video0", deviceID: "cam0", major: 81, minor: 0, qualifier: .group(990),
                        permissions: .read),
            by: rootUser, at: start)
        #expect(try ledger.aclEntries(nodePath: "/dev/video0") == [userEntry, groupEntry])
        #expect(try ledger.aclEntries(grantID: grant.id) == [userEntry])

        // A reset of the grant keeps the entry record (it is still on the node) but unlinks it.
        try ledger.reset(subject: alice, by: rootUser, at: start)
        #expect(try ledger.aclEntries(deviceID: "cam0").first?.grantID == nil)

        let removed = try ledger.recordACLEntryRemoved(nodePath: "/dev/video0", qualifier: .user(alice.uid),
                                                       by: rootUser, at: start)
        #expect(removed?.id == userEntry.id)
        #expect(try ledger.recordACLEntryRemoved(nodePath: "/dev/video0", qualifier: .user(alice.uid),
                                                 by: rootUser, at: start) == nil)
        #expect(try ledger.aclEntries() == [groupEntry])

        let aclEvents = try ledger.events().filter { [.aclAdd, .aclRemove].contains($0.event.type) }
        #expect(aclEvents.map(\.event.type) == [.aclAdd, .aclAdd, .aclRemove])
        #expect(aclEvents[0].event.deviceName == "Integrated Camera")
        #expect(aclEvents[0].event.details["acl_user"] == "1000")
        #expect(aclEvents[1].event.details["permissions"] == "r--")
        #expect(try ledger.verify().isIntact)
    }

    /// A record another writer replaced between a read and the delete is not deleted: not
    /// when the replacement serves another grant, and not when SQLite reused the id for a
    /// replacement serving the same grant.
    @Test func compareAndDeleteLeavesAReplacedRecord() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let first = try ledger.recordGrant(consent(alice, .camera), at: start)
        let second = try ledger.recordGrant(consent(alice, .camera), at: start.addingTimeInterval(1))
        func entry(grant: Int64) -> NewACLEntry {
            NewACLEntry(nodePath: "/dev/video0", deviceID: "cam0", major: 81, minor: 0, qualifier: .user(alice.uid),
                        grantID: grant)
        }
        let read = try ledger.recordACLEntryAdded(entry(grant: first.id), by: rootUser, at: start)
        #expect(try ledger.aclEntries(nodePath: "/dev/video0") == [read])

        // Replaced for another grant (recordACLEntryAdded replaces the path+qualifier record).
        let otherGrant = try ledger.recordACLEntryAdded(entry(grant: second.id), by: rootUser,
                                                        at: start.addingTimeInterval(2))
        #expect(try ledger.recordACLEntryRemoved(read, by: rootUser, at: start.addingTimeInterval(3)) == nil)
        #expect(try ledger.aclEntries() == [otherGrant])

        // Replaced by remove + add for the same grant: the only row went, so the new one gets
        // the same id, node and grant; only its creation time tells it apart.
        let stale = otherGrant
        try #require(try ledger.recordACLEntryRemoved(nodePath: "/dev/video0", qualifier: .user(alice.uid),
                                                      by: rootUser, at: start.addingTimeInterval(4)) == stale)
        let sameGrant = try ledger.recordACLEntryAdded(entry(grant: second.id), by: rootUser,
                                                       at: start.addingTimeInterval(5))
        #expect(sameGrant.id == stale.id, "SQLite reused the rowid, which is why the id alone cannot be compared")
        #expect(try ledger.recordACLEntryRemoved(stale, by: rootUser, at: start.addingTimeInterval(6)) == nil)
        #expect(try ledger.aclEntries() == [sameGrant])

        // Nothing was audited for the refused deletes: adds, and the one plain remove.
        let aclEvents = try ledger.events().filter { [.aclAdd, .aclRemove].contains($0.event.type) }
        #expect(aclEvents.map(\.event.type) == [.aclAdd, .aclAdd, .aclRemove, .aclAdd])

        // The record as read now is the record stored: it is deleted and audited.
        let current = try #require(try ledger.aclEntries().first)
        let removed = try ledger.recordACLEntryRemoved(current, by: rootUser, subject: alice, permission: .camera,
                                                       at: start.addingTimeInterval(7))
        #expect(removed == sameGrant)
        #expect(try ledger.aclEntries().isEmpty)
        let last = try #require(try ledger.events().last?.event)
        #expect(last.type == .aclRemove)
        #expect(last.details["grant_id"] == String(second.id))
        #expect(try ledger.recordACLEntryRemoved(current, by: rootUser, at: start.addingTimeInterval(8)) == nil)
        #expect(try ledger.verify().isIntact)
    }
}
