import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// Bad ledger files and tampered audit rows, through the binary: a clear error naming the
/// file and the problem, a documented exit code, and no write.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: admin commands, chattr"))
struct LedgerFileTests {
    private func seed(_ fx: AdminFixture) throws {
        try fx.camera("video0")
        for words in [["grant", "camera", "--user", fx.alice.name], ["revoke", "camera", "--user", fx.alice.name],
                      ["deny", "camera", "--user", fx.alice.name]] {
            let result = try fx.run(words)
            #expect(result.status == 0, "\(words): \(result.stderr)")
        }
        // grant, acl_add, revoke, acl_remove, grant(deny)
        #expect(try fx.run(["audit", "--verify"]).stdout.contains("intact: 5 events"))
    }

    @Test func editedDeletedAndReorderedEventsAreNamed() throws {
        let fx = try AdminFixture("tamper")
        try seed(fx)
        let pristine = try #require(fx.fileBytes(fx.ledgerPath))
        func restore() throws {
            try pristine.write(to: URL(fileURLWithPath: fx.ledgerPath))
            try? FileManager.default.removeItem(atPath: fx.ledgerPath + "-wal")
            try? FileManager.default.removeItem(atPath: fx.ledgerPath + "-shm")
        }
        // The WAL was checkpointed into the file when the last writer closed; copy is whole.
        try restore()
        #expect(try fx.run(["audit", "--verify"]).status == 0)

        let cases: [(String, String)] = [
            ("UPDATE audit_events SET subject_name = 'mallory' WHERE seq = 3", "event 3 (edited)"),
            ("DELETE FROM audit_events WHERE seq = 2", "event 2 (removed)"),
            ("UPDATE audit_events SET seq = 100 WHERE seq = 2; UPDATE audit_events SET seq = 2 WHERE seq = 3; "
             + "UPDATE audit_events SET seq = 3 WHERE seq = 100", "event 2 (reordered)"),
        ]
        for (sql, expected) in cases {
            try restore()
            #expect(try fx.sql(sql).status == 0)
            let result = try fx.run(["audit", "--verify"])
            #expect(result.status == 65, "\(sql): \(result.stdout) \(result.stderr)")
            #expect(result.stdout.contains("audit chain broken at \(expected)"), "\(sql): \(result.stdout)")
        }
    }

    @Test func corruptLedgerIsRefusedUnchanged() throws {
        let fx = try AdminFixture("corrupt")
        try fx.camera("video0")
        try Data("this is not a database, just some bytes that are long enough to matter\n".utf8)
            .write(to: URL(fileURLWithPath: fx.ledgerPath))
        let before = fx.fileBytes(fx.ledgerPath)
        for words in [["grant", "camera", "--user", fx.alice.name], ["list"], ["reconcile"], ["audit", "--verify"]] {
            let result = try fx.run(words)
            #expect(result.status == 74, "\(words): \(result.stderr)")
            #expect(result.stderr.contains("ledger \(fx.ledgerPath) is not a readable database"), "\(words)")
        }
        #expect(fx.fileBytes(fx.ledgerPath) == before)
        // Status still answers from the nodes, and says why decisions are missing.
        let status = try fx.run(["status", "camera", "--user", fx.alice.name, "--json"])
        #expect(status.status == 0)
        let camera = (try fx.json(status)["permissions"] as? [[String: Any]])?.first
        #expect(camera?["status"] as? String == "notDetermined")
        let reasons = camera?["reasons"] as? [[String: Any]] ?? []
        #expect(reasons.contains { $0["kind"] as? String == "ledger"
            && ($0["message"] as? String ?? "").contains("cannot be read") })
        #expect(try fx.run(["check", "camera", "--user", fx.alice.name]).status == 4)
    }

    @Test func newerSchemaIsRefusedUnchanged() throws {
        let fx = try AdminFixture("newer")
        try seed(fx)
        #expect(try fx.sql("PRAGMA user_version = 99").status == 0)
        let before = try fx.sql("SELECT count(*) FROM grants").stdout
        let result = try fx.run(["grant", "camera", "--user", fx.alice.name])
        #expect(result.status == 74)
        #expect(result.stderr.contains("schema version 99 is newer than this devaccess"))
        #expect(try fx.sql("SELECT count(*) FROM grants").stdout == before)
        #expect(try fx.run(["audit", "--verify"]).status == 74)
    }

    @Test func readOnlyLedgerIsRefusedUnchanged() throws {
        let fx = try AdminFixture("readonly")
        try seed(fx)
        let before = fx.fileBytes(fx.ledgerPath)
        try TestProcess.setup("chattr", ["+i", fx.ledgerPath])
        defer { TestProcess.cleanup("chattr", ["-i", fx.ledgerPath]) }
        let result = try fx.run(["grant", "camera", "--user", fx.alice.name])
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains("ledger \(fx.ledgerPath) cannot be written"))
        #expect(fx.fileBytes(fx.ledgerPath) == before)
        // Reading still works.
        #expect(try fx.run(["list"]).status == 0)
        #expect(try fx.run(["audit", "--verify"]).status == 0)
    }

    @Test func missingLedgerIsNotIntact() throws {
        let fx = try AdminFixture("missing")
        let verify = try fx.run(["audit", "--verify"])
        #expect(verify.status == 74)
        #expect(verify.stderr.contains("no ledger at \(fx.ledgerPath)"))
        let list = try fx.run(["list"])
        #expect(list.status == 0)
        #expect(list.stderr.contains("does not exist yet"))
        #expect(!FileManager.default.fileExists(atPath: fx.ledgerPath))
    }
}
