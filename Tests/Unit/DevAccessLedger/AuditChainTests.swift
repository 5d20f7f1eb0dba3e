import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Audit chain")
struct AuditChainTests {
    /// A ledger holding ten events.
    private func tenEvents() throws -> (TemporaryLedgerDirectory, Ledger) {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let range = try ledger.append(contentsOf: (1...10).map { sampleEvent($0) })
        #expect(range == 1...10)
        return (dir, ledger)
    }

    @Test func intactChainVerifies() throws {
        let (directory, ledger) = try tenEvents()
        defer { withExtendedLifetime(directory) {} }
        #expect(try ledger.verify() == .intact(count: 10))
        let single = try ledger.append(sampleEvent(11))
        #expect(single.seq == 11)
        #expect(try ledger.verify() == .intact(count: 11))
    }

    @Test func emptyLedgerIsIntact() throws {
        let dir = TemporaryLedgerDirectory()
        #expect(try openLedger(dir).verify() == .intact(count: 0))
    }

    @Test func eventsReadBackAsWritten() throws {
        let (directory, ledger) = try tenEvents()
        defer { withExtendedLifetime(directory) {} }
        let events = try ledger.events()
        #expect(events.map(\.seq) == Array(1...10))
        #expect(events[0].prevHash == String(repeating: "0", count: 64))
        #expect(events[1].prevHash == events[0].hash)
        #expect(events[2].event == sampleEvent(3))
        #expect(events[2].detailsJSON == #"{"n":"3","note":"line one\nline \"two\""}"#)
        #expect(try ledger.events(after: 8).map(\.seq) == [9, 10])
    }

    @Test func editedFieldIsNamed() throws {
        let (dir, ledger) = try tenEvents()
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET subject_name = 'mallory' WHERE seq = 4")
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == 4)
        #expect(found.kind == .edited)
    }

    @Test func editedDetailsAndTimeAreNamed() throws {
        let (dir, ledger) = try tenEvents()
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET time_usec = time_usec + 1 WHERE seq = 7")
        #expect(try ledger.verify().chainBreak == ChainBreak(
            seq: 7, kind: .edited,
            explanation: "its stored fields no longer match its hash: it was changed after it was written"))
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET time_usec = time_usec - 1 WHERE seq = 7")
        #expect(try ledger.verify() == .intact(count: 10))
        try rawSQL(dir.ledgerPath, #"UPDATE audit_events SET details = '{"n":"2"}' WHERE seq = 2"#)
        #expect(try ledger.verify().chainBreak?.seq == 2)
    }

    @Test func nullAndEmptyAreDifferent() throws {
        let (dir, ledger) = try tenEvents()
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET program = NULL WHERE seq = 3")
        #expect(try ledger.verify().chainBreak?.kind == .edited)
    }

    @Test func editedAndRehashedEventIsNamed() throws {
        let (dir, ledger) = try tenEvents()
        // Change event 4 and store a correct new hash for it: only event 5's link shows it.
        var forged = sampleEvent(4)
        forged.subject = bob
        let events = try ledger.events()
        let details = DetailsJSON.encode(forged.details)
        let canonical = CanonicalEvent(seq: 4, timeUsec: try Timestamp.microseconds(forged.time), event: forged,
                                       detailsJSON: details)
        let hash = try SHA256Hasher().chainHash(previous: try #require(Hex.decode(events[2].hash.utf8)),
                                                canonical: canonical.bytes)
        try rawSQL(dir.ledgerPath, """
            UPDATE audit_events SET subject_uid = 1001, subject_name = 'bob', hash = '\(hash)' WHERE seq = 4
            """)
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == 4)
        #expect(found.kind == .edited)
    }

    @Test(arguments: [1, 5, 10])
    func removedEventIsNamed(seq: Int) throws {
        let (dir, ledger) = try tenEvents()
        try rawSQL(dir.ledgerPath, "DELETE FROM audit_events WHERE seq = \(seq)")
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == Int64(seq))
        #expect(found.kind == .removed)
    }

    @Test func removedAndRenumberedIsNamed() throws {
        let (dir, ledger) = try tenEvents()
        var sql = "DELETE FROM audit_events WHERE seq = 5;"
        for seq in 6...10 { sql += "UPDATE audit_events SET seq = \(seq - 1) WHERE seq = \(seq);" }
        sql += "UPDATE chain_head SET seq = 9;"
        try rawSQL(dir.ledgerPath, sql)
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == 5)
        #expect(found.kind == .removed)
    }

    @Test func swappedEventsAreNamed() throws {
        let (dir, ledger) = try tenEvents()
        // Every column but seq trades places between events 3 and 4 (7 - 3 = 4, 7 - 4 = 3).
        let assignments = AuditWriter.insertColumns.dropFirst()
            .map { "\($0) = (SELECT \($0) FROM saved WHERE saved.seq = 7 - audit_events.seq)" }
        try rawSQL(dir.ledgerPath, """
            CREATE TEMP TABLE saved AS SELECT * FROM audit_events WHERE seq IN (3, 4);
            UPDATE audit_events SET \(assignments.joined(separator: ", ")) WHERE seq IN (3, 4);
            """)
        let events = try ledger.events()
        #expect(events[2].event == sampleEvent(4))
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == 3)
        #expect(found.kind == .reordered)
    }

    @Test func truncatedTailIsNamedAndAppendsKeepTheGap() throws {
        let (dir, ledger) = try tenEvents()
        try rawSQL(dir.ledgerPath, "DELETE FROM audit_events WHERE seq > 8")
        #expect(try ledger.verify().chainBreak?.seq == 9)
        // A new event continues from the chain head, so the hole stays visible.
        #expect(try ledger.append(sampleEvent(11)).seq == 11)
        let found = try #require(try ledger.verify().chainBreak)
        #expect(found.seq == 9)
        #expect(found.kind == .removed)
    }

    @Test func canonicalEncodingIsUnambiguous() {
        func bytes(actor: String?, subject: String?) -> [UInt8] {
            var event = sampleEvent(1)
            event.actor = actor.map { Principal(uid: 1, name: $0) }
            event.subject = subject.map { Principal(uid: 1, name: $0) }
            return CanonicalEvent(seq: 1, timeUsec: 5, event: event, detailsJSON: "{}").bytes
        }
        #expect(bytes(actor: "ab", subject: "c") != bytes(actor: "a", subject: "bc"))
        #expect(bytes(actor: "a:1:b", subject: nil) != bytes(actor: "a", subject: "b"))
        #expect(bytes(actor: "", subject: nil) != bytes(actor: nil, subject: nil))
        let text = String(decoding: CanonicalEvent(values: [.integer(7), .integer(-3), .text(Array("x\ny".utf8))]
                                                    + Array(repeating: nil, count: 10)).bytes, as: UTF8.self)
        #expect(text == "devaccess-audit-v1\nseq:1:7\ntime_usec:2:-3\ntype:3:x\ny\n")
    }

    /// One bad event fails the whole batch: no rows, no moved chain head.
    @Test func failedBatchWritesNothing() throws {
        let (directory, ledger) = try tenEvents()
        defer { withExtendedLifetime(directory) {} }
        var bad = sampleEvent(12)
        bad.time = Date(timeIntervalSince1970: .infinity)
        #expect(throws: LedgerError.self) {
            try ledger.append(contentsOf: [sampleEvent(11), bad])
        }
        #expect(try ledger.eventCount() == 10)
        #expect(try ledger.append(sampleEvent(11)).seq == 11)
        #expect(try ledger.verify() == .intact(count: 11))
    }

    @Test func concurrentWritersKeepOneChain() async throws {
        let dir = TemporaryLedgerDirectory()
        let first = try openLedger(dir)
        let second = try openLedger(dir)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, ledger) in [first, second, first, second].enumerated() {
                group.addTask {
                    for batch in 0..<10 {
                        try ledger.append(contentsOf: (0..<5).map { sampleEvent(index * 100 + batch * 5 + $0) })
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try first.verify() == .intact(count: 200))
    }
}
