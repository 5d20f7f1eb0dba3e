import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

/// How the ledger spells the one term: a queued request's `scope` and `duration_sec`
/// columns as asked, a grant's `scope` and `expires` as recorded. The stored values are
/// those of every earlier version.
@Suite("Grant term storage")
struct GrantTermStorageTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func aQueuedTermIsStoredAsItsWordAndSecondsAndReadBack() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let terms: [GrantTerm?] = [nil, .once, .duration(seconds: 600), .always]
        for term in terms {
            _ = try ledger.queueRequest(NewPendingRequest(subject: alice, permissions: [.camera], scope: term), at: now)
        }
        #expect(try ledger.pendingRequests().map(\.scope) == terms)
        var stored: [[String]] = []
        do {
            let db = try SQLiteDatabase.open(path: dir.ledgerPath, readOnly: true)
            let rows = try db.prepare("SELECT scope, duration_sec FROM pending_requests ORDER BY id")
            while try rows.step() {
                stored.append([rows.text(0) ?? "NULL", rows.int64(1).map(String.init) ?? "NULL"])
            }
        }
        #expect(stored == [["NULL", "NULL"], ["once", "NULL"], ["for", "600"], ["always", "NULL"]])
        let details = try ledger.events().filter { $0.event.type == .approvalQueued }.map(\.event.details)
        #expect(details.map { $0["scope"] } == ["default", "once", "for", "always"])
        #expect(details.map { $0["duration_sec"] } == [nil, nil, "600", nil])
    }

    @Test func aResolvedTermIsRecordedAsScopeAndExpiry() {
        let hour: Int64 = 3600
        #expect(ResolvedTerm(.once).recorded(at: now) == (.once, nil))
        #expect(ResolvedTerm(.once, cap: hour).recorded(at: now) == (.once, now.addingTimeInterval(3600)),
                "MaxDuration= ends a once at the latest")
        #expect(ResolvedTerm(.duration(seconds: 90)).recorded(at: now) == (.duration, now.addingTimeInterval(90)))
        #expect(ResolvedTerm(.always).recorded(at: now) == (.always, nil))
        #expect(ResolvedTerm(.always).capped(8 * hour).recorded(at: now) == (.duration, now.addingTimeInterval(8 * 3600)))
    }

    /// The stored spelling is the ledger's since its first schema (rows and hashed audit
    /// details say `until`); the word and its stored name go both ways.
    @Test func aRecordedGrantKeepsTheLedgersSpellingOfItsTerm() {
        #expect(GrantTerm.Word.allCases.map(\.recordedName) == ["once", "until", "always"], "the stored values")
        #expect(GrantTerm.Word.allCases.allSatisfy { GrantTerm.Word(recordedName: $0.recordedName) == $0 })
        #expect(GrantTerm.Word(recordedName: "for") == nil, "the ledger never stored 'for'")
    }
}
