import Foundation
import Glibc
import Testing
import DevAccessLedger
import DevAccessTestSupport

/// `audit --archive` and the reason cap through the real binary, `--offline` (root's
/// repair mode, no daemon); through devaccessd they are tested in DevAccessBrokerTests.
@Suite(.serialized, .enabled(if: getuid() == 0, "makes users and nodes"))
struct AuditArchiveCommandTests {
    @Test func anOverlongReasonIsRefusedBeforeAnythingIsWritten() throws {
        let fx = try AdminFixture("arcreason")
        try fx.camera("video0")
        let long = String(repeating: "r", count: 1025)
        for command in [["grant", "camera", "--user", fx.alice.name, "--reason", long],
                        ["revoke", "camera", "--user", fx.alice.name, "--reason", long]] {
            let run = try fx.run(command)
            #expect(run.status == 64, "\(command[0]): \(run.stderr)")
            #expect(run.stderr.contains("1024 bytes"), "\(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: fx.ledgerPath))
        let fits = try fx.run(["grant", "camera", "--user", fx.alice.name, "--reason", String(long.dropLast())])
        #expect(fits.status == 0, "\(fits.stderr)")
    }

    @Test func offlineArchiveThenVerifyBothWithARelativeArchivePath() throws {
        let fx = try AdminFixture("arcoff")
        try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.run(["revoke", "camera", "--user", fx.alice.name]).status == 0)
        usleep(1_100_000)
        let archived = try fx.run(["audit", "--archive", "1s", "--json"])
        #expect(archived.status == 0, "\(archived.stderr)")
        let document = try fx.json(archived)
        let path = try #require(document["archive"] as? String)
        #expect((document["events"] as? Int ?? 0) >= 4, "\(archived.stdout)")
        #expect(document["vacuumed"] is Bool && document["ledgerBytesAfter"] is Int, "\(archived.stdout)")
        let verify = try fx.run(["audit", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stdout.contains("older ones are archived"), "\(verify.stdout)")
        // A relative --archive-file is the caller's, made absolute before it is sent.
        let name = String(path.split(separator: "/").last ?? "")
        let relative = try TestProcess.run("/bin/sh", ["-c", #"cd "$1" && exec "$2" audit --verify --archive-file "$3" --offline"#,
                                                       "sh", fx.state.path, TestProcess.devaccessBinary, name],
                                           environment: fx.environment)
        #expect(relative.status == 0, "\(relative.stdout) \(relative.stderr)")
        #expect(relative.stdout.contains("archive intact"), "\(relative.stdout)")
        // Nothing older now: nothing moves, no file.
        let none = try fx.run(["audit", "--archive", "1w"])
        #expect(none.status == 0 && none.stdout.contains("nothing was archived"), "\(none.stdout) \(none.stderr)")
    }
}
