import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// What a local user (or a careless admin's setup) tries against `devaccess switch --hard`,
/// in the real daemon with real users and real opens.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users, groups and ACLs"))
struct PrivacySwitchAttackTests {
    static func root(_ arguments: [String], _ setup: RequestSetup) throws -> ProcessOutput {
        try TestProcess.devaccess(arguments + setup.socket)
    }

    /// udev's `OWNER=` (or a careless rule) can make a user own a capture node. The owner of
    /// a file may chmod it and set its ACL: with the switch off, the owner must not be able
    /// to give themselves the camera back.
    @Test func theNodesOwnerCannotGiveThemselvesTheCameraBackWhileItIsOff() throws {
        let setup = try RequestSetup(policy: PrivacySwitchTests.policy)
        let owner = try TestUser("swown")
        let camera = setup.camera
        try TestProcess.setup("chown", [owner.name, camera])
        try TestProcess.setup("chmod", ["0660", camera])
        #expect(try owner.canOpen(camera, .readWrite))
        let before = try PrivacySwitchTests.access(camera)

        let off = try Self.root(["switch", "camera", "off", "--hard"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        #expect(try !owner.canOpen(camera, .read), "the owner opened it while off")

        // The owner's own tools: chmod, setfacl.
        _ = try owner.run("/bin/chmod", ["0666", camera])
        _ = try owner.run("/usr/bin/setfacl", ["-m", "u:\(owner.uid):rw", camera])
        let afterOwner = try PrivacySwitchTests.access(camera)
        #expect(try !owner.canOpen(camera, .read), "the owner gave themselves access back: \(afterOwner)")

        let on = try Self.root(["switch", "camera", "on"], setup)
        #expect(on.status == 0, "\(on.stdout) \(on.stderr)")
        #expect(try owner.canOpen(camera, .readWrite))
        #expect(try PrivacySwitchTests.access(camera) == before)
    }

    /// A non-admin repeating `switch camera on` is refused each time (77) but does not write
    /// a row for every attempt: refusals share the per-user audit budget.
    @Test func refusedSwitchAttemptsDoNotFloodTheAuditTrail() throws {
        let setup = try RequestSetup(policy: PrivacySwitchTests.policy)
        let user = try TestUser("swflood")
        let attempts = 45
        for _ in 0..<attempts {
            let refused = try user.devaccess(["switch", "camera", "off", "--hard"] + setup.socket)
            #expect(refused.status == 77, "\(refused.stdout) \(refused.stderr)")
        }
        let rows = try setup.ledger().events().map(\.event).filter {
            $0.type == .refused && $0.actor?.uid == user.uid && $0.details["operation"] == "switch"
        }
        #expect(!rows.isEmpty)
        #expect(rows.count <= 20, "\(rows.count) refusal rows for \(attempts) attempts")
        #expect(try setup.ledger().switches().isEmpty)
    }

    /// While off, the path comes to name another device (a replug that got another number,
    /// or something put there): `on` must not write the old node's saved access (a foreign
    /// user's ACL entry, group bits) onto it.
    @Test func onDoesNotPutTheSavedAccessOnAnotherDeviceAtThePath() throws {
        let setup = try RequestSetup(policy: PrivacySwitchTests.policy)
        let foreign = try TestUser("swother")
        let camera = setup.camera
        try TestProcess.setup("chmod", ["0660", camera])
        try TestProcess.setup("setfacl", ["-m", "u:\(foreign.name):rw", camera])
        #expect(try foreign.canOpen(camera, .readWrite))
        let off = try Self.root(["switch", "camera", "off", "--hard"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        #expect(try !foreign.canOpen(camera, .read))

        // 1:5 (/dev/zero's numbers), root's, 0600, made aside and renamed into place.
        #expect(unlink(camera) == 0)
        try TestProcess.setup("mknod", ["-m", "0600", "\(camera).other", "c", "1", "5"])
        try TestProcess.setup("mv", ["\(camera).other", camera])
        let other = try PrivacySwitchTests.access(camera)
        _ = try Self.root(["switch", "camera", "on"], setup)
        #expect(try !foreign.canOpen(camera, .read), "the old node's ACL entry was put on 1:5")
        #expect(try PrivacySwitchTests.access(camera) == other)
        #expect(try setup.ledger().savedNodeAccess().isEmpty)
    }

    /// devaccessd killed (kill -9) between saving a node's access and stripping it, and
    /// again between putting it back and dropping the saved row: the next start converges,
    /// and the node ends exactly as it was.
    @Test func aDaemonKilledMidSwitchConvergesOnTheNextStart() throws {
        let setup = try RequestSetup(policy: PrivacySwitchTests.policy,
                                     firstDaemonEnvironment: ["DEVACCESS_TEST_CRASH_AT": "after-ledger-write"])
        let foreign = try TestUser("swcrash")
        let camera = setup.camera
        try TestProcess.setup("chmod", ["0660", camera])
        try TestProcess.setup("setfacl", ["-m", "u:\(foreign.name):rw", camera])
        let before = try PrivacySwitchTests.access(camera)

        _ = try Self.root(["switch", "camera", "off", "--hard"], setup)
        #expect(setup.daemon.stop(SIGKILL, timeout: 10) != nil)
        // Saved, not yet stripped.
        #expect(try setup.ledger().savedNodeAccess().count == 1)
        #expect(try foreign.canOpen(camera, .read), "the crash point was not reached: \(setup.daemon.log)")

        try setup.start()
        #expect(try !foreign.canOpen(camera, .read), "the restarted daemon left the node open")
        #expect(try setup.ledger().switches().first?.hard == true)

        let on = try Self.root(["switch", "camera", "on"], setup)
        #expect(on.status == 0, "\(on.stdout) \(on.stderr)")
        #expect(try foreign.canOpen(camera, .readWrite))
        #expect(try PrivacySwitchTests.access(camera) == before)
        #expect(try setup.ledger().savedNodeAccess().isEmpty)
    }
}
