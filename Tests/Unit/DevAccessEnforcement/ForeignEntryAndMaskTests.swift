import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// The engine never takes over an entry it did not make, even one that appears between its
/// probe and its edit, and never changes what anyone else can do with a node. Real nodes,
/// real users, real opens (see `EngineFixture`).
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users, device nodes and ACLs"))
struct ForeignEntryAndMaskTests {
    /// logind or an admin adds `user:alice:r` after the engine probed the node (no entry
    /// then) and before it edits it: the grant must neither widen that entry to `rw` nor
    /// keep a record that would let a later revoke or expiry remove it.
    @Test func entryPlantedAfterTheProbeIsNeitherWidenedNorAdopted() throws {
        let fx = try EngineFixture("race")
        let node = try fx.camera("video0")
        // The probe is taken first...
        let probed = DeclaredDeviceSource(devices: fx.declared).report(for: .camera)
        #expect(probed.devices.first?.nodes.first?.facts?.acl == nil)
        // ...then the entry appears, then the engine edits from what it probed.
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.alice.name):r", node])
        let planted = try fx.getfacl(node)
        #expect(planted.contains("user:\(fx.alice.uid):r--"))

        let outcome = try fx.allow(fx.alice, engine: try fx.engine(devices: FixedDeviceSource([probed])))
        #expect(outcome.report.changes.isEmpty)
        #expect(outcome.report.problems.isEmpty)
        #expect(outcome.report.drift.kinds(for: fx.alice.uid) == [.unrecordedEntry])
        #expect(outcome.report.drift.first?.message.contains("did not make") == true)
        #expect(try fx.getfacl(node) == planted)
        #expect(try fx.alice.canOpen(node, .read))
        #expect(try !fx.alice.canOpen(node, .write))
        // Nothing of devaccess's claims the entry: the intent record was undone.
        #expect(try fx.ledger().aclEntries().isEmpty)
        #expect(try fx.ledger().events().map(\.event.type) == [.grant, .aclAdd, .aclRemove])

        // A later run with a fresh probe still sees someone else's entry and leaves it.
        let reconciled = try fx.engine().reconcile()
        #expect(reconciled.changes.isEmpty)
        #expect(reconciled.drift.kinds(for: fx.alice.uid) == [.unrecordedEntry])
        #expect(try fx.getfacl(node) == planted)

        // Revoke (and expiry, which takes the same path) leaves it in place.
        let revoked = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(revoked.revoked.map(\.id) == [outcome.grant.id])
        #expect(revoked.report.changes.isEmpty)
        #expect(try fx.getfacl(node) == planted)
        #expect(try fx.alice.canOpen(node, .read))
        #expect(try fx.ledger().verify().isIntact)
    }

    /// The same race with an entry as wide as the grant: still not devaccess's, so not
    /// reported as added and not removed by revoke.
    @Test func sufficientEntryPlantedAfterTheProbeIsNotCountedAsAdded() throws {
        let fx = try EngineFixture("racerw")
        let node = try fx.camera("video0")
        let probed = DeclaredDeviceSource(devices: fx.declared).report(for: .camera)
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.alice.name):rw", node])
        let planted = try fx.getfacl(node)

        let outcome = try fx.allow(fx.alice, engine: try fx.engine(devices: FixedDeviceSource([probed])))
        #expect(outcome.report.changes.isEmpty)
        #expect(outcome.report.drift.kinds(for: fx.alice.uid) == [.unrecordedEntry])
        #expect(outcome.report.drift.first?.message.contains("revoking will not remove it") == true)
        #expect(try fx.ledger().aclEntries().isEmpty)

        _ = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(try fx.getfacl(node) == planted)
        #expect(try fx.alice.canOpen(node, .readWrite))
    }

    /// devaccess's own entry, narrowed by `chmod g-w` (which narrows the mask): reconcile
    /// makes it effective again, but the owning group and a named user stay read-only, and
    /// revoke does not hand them write either.
    @Test func ownEntryRestoredWithoutWideningAnyoneElse() throws {
        let fx = try EngineFixture("mask")
        let carol = try TestUser("maskc")
        let owners = try TestGroup("mask", members: [carol])
        let node = try fx.camera("video0", group: owners.name, mode: "0660")
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.bob.name):rw,m::r", node])
        for user in [carol, fx.bob] {
            #expect(try user.canOpen(node, .read))
            #expect(try !user.canOpen(node, .write))
        }

        let granted = try fx.allow(fx.alice)
        #expect(granted.report.changes.map(\.action) == [.aclAdded])
        #expect(try fx.alice.canOpen(node, .readWrite))
        for user in [carol, fx.bob] {
            #expect(try user.canOpen(node, .read), "\(user.name) after the grant")
            #expect(try !user.canOpen(node, .write), "\(user.name) after the grant")
        }

        try TestProcess.setup("chmod", ["g-w", node])
        #expect(try !fx.alice.canOpen(node, .write))
        let restored = try fx.engine().reconcile()
        #expect(restored.changes.map(\.action) == [.aclAdded])
        #expect(restored.changes.first?.message.contains("not in effect") == true)
        #expect(try fx.alice.canOpen(node, .readWrite))
        for user in [carol, fx.bob] {
            #expect(try user.canOpen(node, .read), "\(user.name) after reconcile")
            #expect(try !user.canOpen(node, .write), "\(user.name) after reconcile")
        }

        let revoked = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(revoked.report.changes.map(\.action) == [.aclRemoved])
        #expect(try !fx.alice.canOpen(node, .read))
        for user in [carol, fx.bob] {
            #expect(try user.canOpen(node, .read), "\(user.name) after the revoke")
            #expect(try !user.canOpen(node, .write), "\(user.name) after the revoke")
        }
    }
}
