import Foundation
import Glibc
import Testing
import DevAccessCore
@testable import DevAccessLedger

/// Retention: old events move to an archive file, and tampering with either file, or
/// with the record that links them, is found.
@Suite("Audit archive")
struct AuditArchiveTests {
    static let base = Date(timeIntervalSince1970: 1_800_000_000)

    /// 50 events, event n at base + n seconds; then events 1...29 archived (before base + 30).
    private func archived() throws -> (TemporaryLedgerDirectory, Ledger, AuditArchiveOutcome) {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...50).map { sampleEvent($0, time: Self.base) })
        let outcome = try ledger.archiveAudit(before: Self.base.addingTimeInterval(30), to: nil, by: rootUser,
                                              now: Self.base.addingTimeInterval(100))
        return (dir, ledger, outcome)
    }

    private func archivePath(_ outcome: AuditArchiveOutcome) throws -> String {
        try #require(outcome.anchor?.archivePath)
    }

    @Test func archivedEventsLeaveTheLedgerAndBothFilesVerify() throws {
        let (dir, ledger, outcome) = try archived()
        let anchor = try #require(outcome.anchor)
        #expect(anchor.firstSeq == 1 && anchor.throughSeq == 29 && anchor.events == 29)
        #expect(anchor.eventSeq == 51)
        #expect(anchor.archivePath.hasPrefix(dir.path + "/audit-archive-"))
        let events = try ledger.events()
        #expect(events.map(\.seq) == Array(30...51))
        #expect(events.first?.prevHash == anchor.throughHash)
        #expect(events.last?.event.type == .archived)
        // The ledger's chain starts at the anchor: 21 old events and the record.
        #expect(try ledger.verify() == .intact(count: 22))
        #expect(try ledger.archiveAnchor() == anchor)
        let archive = try ledger.verifyArchive(at: anchor.archivePath)
        #expect(archive.chain == .intact(count: 29))
        #expect(archive.link == .anchored(eventSeq: 51))
        #expect(archive.isIntact)
        // Private like the ledger.
        var info = stat()
        #expect(lstat(anchor.archivePath, &info) == 0 && info.st_mode & 0o777 == 0o600)
        // Appends continue the chain after the record.
        try ledger.append(sampleEvent(60, time: Self.base))
        #expect(try ledger.verify() == .intact(count: 23))
    }

    @Test func aSecondRunArchivesTheNextRunAndBothArchivesLink() throws {
        let (dir, ledger, first) = try archived()
        defer { _ = dir }
        let second = try ledger.archiveAudit(before: Self.base.addingTimeInterval(45), to: nil, by: rootUser,
                                             now: Self.base.addingTimeInterval(200))
        let anchor = try #require(second.anchor)
        #expect(anchor.firstSeq == 30 && anchor.throughSeq == 44)
        #expect(try ledger.verify() == .intact(count: 8))  // 45...50, the first record (51) and the second
        #expect(try ledger.verifyArchive(at: archivePath(first)).isIntact)
        #expect(try ledger.verifyArchive(at: anchor.archivePath).isIntact)
    }

    @Test func aLargeArchiveGivesTheSpaceBackAndASmallOneDoesNotRewriteTheLedger() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...3000).map { sampleEvent($0, time: Self.base) })
        let small = try ledger.archiveAudit(before: Self.base.addingTimeInterval(11), to: nil, by: rootUser)
        #expect(small.anchor?.events == 10)
        #expect(!small.vacuumed, "10 of 3000 events free too little to rewrite the ledger for")
        let large = try ledger.archiveAudit(before: Self.base.addingTimeInterval(2991), to: nil, by: rootUser)
        #expect(large.anchor?.events == 2980)
        #expect(large.vacuumed)
        let before = try #require(large.ledgerBytesBefore), after = try #require(large.ledgerBytesAfter)
        #expect(after * 4 < before, "\(before) -> \(after) bytes")
        #expect(try ledger.verify() == .intact(count: 12))  // 2991...3000 and the two records
        #expect(try ledger.verifyArchive(at: #require(large.anchor?.archivePath)).isIntact)
    }

    @Test func nothingOldEnoughMovesNothing() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...5).map { sampleEvent($0, time: Self.base) })
        let outcome = try ledger.archiveAudit(before: Self.base, to: nil, by: rootUser)
        #expect(outcome.anchor == nil)
        #expect(directoryEntries(dir.path).allSatisfy { !$0.hasPrefix("audit-archive-") })
        #expect(try ledger.verify() == .intact(count: 5))
    }

    @Test func anEditedArchivedEventIsNamed() throws {
        let (dir, ledger, outcome) = try archived()
        defer { _ = dir }
        let path = try archivePath(outcome)
        try rawSQL(path, "UPDATE audit_events SET subject_name = 'mallory' WHERE seq = 10")
        let result = try ledger.verifyArchive(at: path)
        #expect(result.chain.chainBreak?.seq == 10)
        #expect(result.chain.chainBreak?.kind == .edited)
        #expect(!result.isIntact)
    }

    @Test func anArchivedEventDeletedInTheMiddleIsNamed() throws {
        let (dir, ledger, outcome) = try archived()
        defer { _ = dir }
        let path = try archivePath(outcome)
        try rawSQL(path, "DELETE FROM audit_events WHERE seq = 15")
        let result = try ledger.verifyArchive(at: path)
        #expect(result.chain.chainBreak == ChainBreak(seq: 15, kind: .removed,
                                                      explanation: "event 15 is missing (the next stored event is 16)"))
    }

    @Test func aTruncatedArchiveWithItsRecordRewrittenNoLongerLinks() throws {
        let (dir, ledger, outcome) = try archived()
        defer { _ = dir }
        let path = try archivePath(outcome)
        // The newest archived event removed and the archive's own record moved back to match.
        try rawSQL(path, """
            DELETE FROM audit_events WHERE seq = 29;
            UPDATE archive_info SET through_seq = 28, events = 28,
                through_hash = (SELECT hash FROM audit_events WHERE seq = 28);
            """)
        let result = try ledger.verifyArchive(at: path)
        #expect(result.chain == .intact(count: 28))
        guard case .mismatch(let seq, let explanation) = result.link else {
            Issue.record("expected a mismatch, got \(result.link)")
            return
        }
        #expect(seq == 51)
        #expect(explanation.contains("1...29"))
        #expect(!result.isIntact)
    }

    @Test func theLedgerAfterArchivingStillShowsTampering() throws {
        let (dir, ledger, _) = try archived()
        // The first remaining event deleted: the ledger no longer starts where the record says.
        try rawSQL(dir.ledgerPath, "DELETE FROM audit_events WHERE seq = 30")
        #expect(try ledger.verify().chainBreak == ChainBreak(
            seq: 30, kind: .removed, explanation: "event 30 is missing (the next stored event is 31)"))
    }

    @Test func anEditedOrDeletedArchiveRecordIsFound() throws {
        let (dir, ledger, _) = try archived()
        try rawSQL(dir.ledgerPath, #"UPDATE audit_events SET details = replace(details, '"29"', '"31"') WHERE seq = 51"#)
        // The record now says events up to 31 were archived, but 30 and 31 are still here.
        #expect(try ledger.verify().chainBreak == ChainBreak(seq: 30, kind: .inserted, explanation: """
            it is stored, but the chain starts at event 32, chained to the hash of event 31, the last one moved to an \
            archive (recorded by event 51)
            """))
        let (dir2, ledger2, _) = try archived()
        try rawSQL(dir2.ledgerPath, "DELETE FROM audit_events WHERE seq = 51")
        // Without its record, the ledger seems to start at event 30: 1...29 are missing.
        #expect(try ledger2.verify().chainBreak?.seq == 1)
    }

    @Test func anEditInTheLedgerAfterArchivingIsNamed() throws {
        let (dir, ledger, _) = try archived()
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET actor_name = 'mallory' WHERE seq = 40")
        #expect(try ledger.verify().chainBreak?.seq == 40)
        #expect(try ledger.verify().chainBreak?.kind == .edited)
    }

    @Test func aBrokenChainIsNotArchived() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...10).map { sampleEvent($0, time: Self.base) })
        try rawSQL(dir.ledgerPath, "DELETE FROM audit_events WHERE seq = 5")
        #expect(throws: LedgerError.self) {
            try ledger.archiveAudit(before: Self.base.addingTimeInterval(8), to: nil, by: rootUser)
        }
        #expect(try ledger.eventCount() == 9)
        #expect(directoryEntries(dir.path).allSatisfy { !$0.hasPrefix("audit-archive-") })
    }

    @Test func targetsThatCouldBeSwappedAreRefused() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...10).map { sampleEvent($0, time: Self.base) })
        let before = Self.base.addingTimeInterval(5)
        // A symlink (to a file that does not exist yet) and an existing file.
        let link = dir.file("link.db")
        #expect(symlink(dir.file("elsewhere.db"), link) == 0)
        #expect(FileManager.default.createFile(atPath: dir.file("existing.db"), contents: Data("keep".utf8)))
        // A directory others may write, not sticky.
        let open = dir.file("open")
        #expect(mkdir(open, 0o777) == 0 && chmod(open, 0o777) == 0)
        for target in [link, dir.file("existing.db"), open + "/a.db"] {
            do {
                _ = try ledger.archiveAudit(before: before, to: target, by: rootUser)
                Issue.record("archived to \(target)")
            } catch {
                guard case .archiveTarget = error else {
                    Issue.record("\(target): \(error)")
                    continue
                }
            }
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("elsewhere.db")))
        #expect(FileManager.default.contents(atPath: dir.file("existing.db")) == Data("keep".utf8))
        #expect(try ledger.eventCount() == 10)
        #expect(try ledger.verify() == .intact(count: 10))
        // A file of another kind is not an archive.
        #expect(throws: LedgerError.self) { try ledger.verifyArchive(at: dir.ledgerPath) }
    }
}
