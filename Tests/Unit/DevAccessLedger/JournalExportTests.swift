import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

@Suite("Journal export")
struct JournalExportTests {
    @Test func everyKnownTypeHasItsOwnMessageID() {
        let ids = AuditEventType.known.map(\.messageID)
        #expect(Set(ids).count == ids.count)
        #expect(!ids.contains(AuditEventType(rawValue: "something_new").messageID))
        for id in ids {
            #expect(id.utf8.count == 32 && Hex.decode(id.utf8) != nil)
        }
    }

    @Test func fieldsCarryTheEventAndItsHash() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let recorded = try ledger.append(sampleEvent(1))
        let fields = JournalExporter.fields(for: recorded)
        #expect(fields.contains("MESSAGE_ID=3591b7cc18bb4386b4ce543a3089bd2b"))
        #expect(fields.contains("DEVACCESS_EVENT=decision"))
        #expect(fields.contains("DEVACCESS_SEQ=1"))
        #expect(fields.contains("DEVACCESS_SUBJECT_UID=1000"))
        #expect(fields.contains("DEVACCESS_DEVICE_NAME=Integrated Camera"))
        #expect(fields.contains("DEVACCESS_HASH=\(recorded.hash)"))
        #expect(fields.contains("DEVACCESS_DETAILS=\(recorded.detailsJSON)"))
        #expect(fields.contains("MESSAGE=devaccess decision: camera for alice (1000) device Integrated Camera node /dev/video0 by alice (1000) [seq 1]"))
        // Every field is NAME=value with a journal-legal name.
        for field in fields {
            let name = field.prefix { $0 != "=" }
            #expect(!name.isEmpty && name.allSatisfy { $0.isUppercase || $0.isNumber || $0 == "_" })
        }
    }

    /// journald may be absent (as here) or refuse; the ledger write must not care.
    @Test func exportNeverFailsAWrite() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try Ledger(path: dir.ledgerPath, journal: .enabled)
        try ledger.append(contentsOf: (1...3).map { sampleEvent($0) })
        #expect(try ledger.verify() == .intact(count: 3))
    }
}
