import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// The approval queue without devaccessd (`--offline`, root's repair mode): `pending`,
/// `approve` and `reject` go through the contract to the engine in the command, which
/// records the resolution and applies it; nobody waits to be told.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: --offline, test users, device nodes"))
struct PendingOfflineTests {
    /// A ledger with request 1 of alice for the camera waiting, under a policy of auth_admin.
    static func queued(_ fx: AdminFixture, policy: TemporaryDirectory) throws -> [String: String] {
        try Data("[camera]\nDefault=auth_admin\n".utf8).write(to: URL(fileURLWithPath: policy.path + "/devaccess.conf"))
        let environment = ["DEVACCESS_CONFIG_DIR": policy.path]
        let created = try fx.run(["reconcile"], extra: environment)
        #expect(created.status == 0, "\(created.stderr)")
        let insert = try fx.sql("INSERT INTO pending_requests (subject_uid, user_name, permissions, scope, reason, "
            + "created_usec) VALUES (\(fx.alice.uid), '\(fx.alice.name)', 'camera', 'always', 'lab', 1000000)")
        #expect(insert.status == 0, "\(insert.stderr)")
        return environment
    }

    @Test func rootListsAndApprovesWithoutTheDaemonAndNotTwice() throws {
        let fx = try AdminFixture("pendoff")
        let camera = try fx.camera("video0")
        let policy = try TemporaryDirectory()
        let environment = try Self.queued(fx, policy: policy)
        let listed = try fx.run(["pending", "--json", "--offline"], extra: environment)
        #expect(listed.status == 0, "\(listed.stderr)")
        let requests = try fx.json(listed)["requests"] as? [[String: Any]]
        #expect(requests?.count == 1 && requests?.first?["user"] as? String == fx.alice.name, "\(listed.stdout)")
        #expect(try !fx.alice.canOpen(camera, .readWrite))
        let approved = try fx.run(["approve", "1", "--offline"], extra: environment)
        #expect(approved.status == 0, "\(approved.stderr)")
        #expect(approved.stdout.hasPrefix("request 1 of \(fx.alice.name) (uid \(fx.alice.uid)) approved"), "\(approved.stdout)")
        #expect(try fx.alice.canOpen(camera, .readWrite), "the approval's grant is applied to the node")
        let twice = try fx.run(["reject", "1", "--deny", "--offline"], extra: environment)
        #expect(twice.status == 64 && twice.stderr.contains("already approved by root"), "\(twice.stderr)")
        let none = try fx.run(["pending", "--offline"], extra: environment)
        #expect(none.status == 0 && none.stderr.contains("no request is waiting"), "\(none.stderr)")
    }

    /// `--offline` is root's: another user is refused it (77) and nothing is decided.
    @Test func anotherUserMayNotUseTheQueueOffline() throws {
        let fx = try AdminFixture("pendoffu")
        try fx.camera("video0")
        let policy = try TemporaryDirectory()
        _ = try Self.queued(fx, policy: policy)
        for words in [["pending"], ["approve", "1"], ["reject", "1"]] {
            let refused = try fx.run(as: fx.alice, words + ["--offline"])
            #expect(refused.status == 77 && refused.stderr.contains("--offline' needs root"), "\(words): \(refused.stderr)")
            let noDaemon = try fx.run(as: fx.alice, words)
            #expect(noDaemon.status == 69 && noDaemon.stderr.contains("cannot reach devaccessd"), "\(words)")
        }
        #expect(try fx.sql("SELECT resolution IS NULL FROM pending_requests WHERE id = 1").stdout
                    .trimmingCharacters(in: .whitespacesAndNewlines) == "1", "the request still waits")
    }
}
