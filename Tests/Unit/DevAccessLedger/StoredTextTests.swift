import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

/// No path that stores a reason can make a row or an event larger than the caps, however
/// long the text it was given (the protocol refuses them earlier; this is the last line).
@Suite("Stored text caps")
struct StoredTextTests {
    @Test func aLongTextIsCutAtACharacterBoundaryAndSaysSo() {
        #expect(StoredText.capped("short") == "short")
        let exact = String(repeating: "a", count: 1024)
        #expect(StoredText.capped(exact) == exact)
        let long = String(repeating: "é", count: 2000)  // 4000 bytes, 2 per character
        let capped = StoredText.capped(long)
        #expect(capped.utf8.count <= 1024)
        #expect(capped.hasSuffix(" [cut: 4000 bytes]"))
        #expect(capped.hasPrefix("éé"))
        #expect(!capped.unicodeScalars.contains("\u{FFFD}"))
    }

    @Test func everyReasonPathStoresAtMostOneKibibyte() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let reason = String(repeating: "r", count: 5000)
        let now = Date()
        let grant = try ledger.recordGrant(NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always,
                                                    decidedBy: rootUser, method: .admin, reason: "once: " + reason), at: now)
        #expect(grant.reason.utf8.count <= 1024)
        try ledger.revoke(permission: .camera, uid: alice.uid, by: rootUser, reason: reason, at: now)
        let pending = try ledger.queueRequest(NewPendingRequest(subject: alice, program: nil, permissions: [.microphone],
                                                                scope: nil, reason: reason), at: now)
        #expect(pending.reason.utf8.count <= 1024)
        try ledger.resolvePendingRequest(id: pending.id, as: .withdrawn, by: alice, note: reason, at: now)
        // An event built elsewhere: reasons 1 KiB, any other value 4 KiB.
        try ledger.append(AuditEvent(type: .refused, actor: bob, details: ["reason": reason, "started_by": reason + reason]))
        let events = try ledger.events()
        #expect(events.count >= 5)
        for event in events {
            for (key, value) in event.event.details {
                let limit = ["reason", "note", "revoke_reason"].contains(key) ? 1024 : 4096
                #expect(value.utf8.count <= limit, "\(event.event.type) \(key): \(value.utf8.count) bytes")
            }
        }
        #expect(events.last?.event.details["started_by"]?.hasSuffix(" [cut: 10000 bytes]") == true)
        #expect(try ledger.verify() == .intact(count: Int64(events.count)))
    }
}
