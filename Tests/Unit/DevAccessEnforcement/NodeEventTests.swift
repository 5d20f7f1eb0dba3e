import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// A udev event applies the ledger to that node's device only (`Enforcer.applyNodes`), on
/// real nodes (mknod 1:3) with real ACLs and real opens. Each test has a second device
/// whose node is left wrong on purpose: a full reconcile would repair it, a per-device pass
/// must not touch it. That the pass records what the full reconcile would have recorded is
/// checked by running the full reconcile afterwards: it finds nothing more to do on the
/// event's node.
@Suite(.serialized, .enabled(if: isRoot, "makes nodes, users and ACLs"))
struct NodeEventTests {
    /// Removes the node and makes it again, as a replug does (a new inode, no ACL).
    static func recreate(_ fx: EngineFixture, _ name: String) throws {
        try TestProcess.setup("rm", ["-f", "\(fx.nodes.path)/\(name)"])
        _ = try fx.nodes.makeNullNode(name)
    }

    static func hasEntry(_ path: String, _ user: TestUser) -> Bool {
        ((try? ACLReader.extendedEntries(at: path)) ?? nil)?.contains { $0.tag == .user(user.uid) } ?? false
    }

    @Test func aReCreatedNodeWithAStandingGrantGetsItsEntryAndNothingElseIsTouched() throws {
        let fx = try EngineFixture("nevplug")
        let cam0 = try fx.camera("video0")
        let cam1 = try fx.camera("video1")
        _ = try fx.allow(fx.alice)
        #expect(Self.hasEntry(cam0, fx.alice) && Self.hasEntry(cam1, fx.alice))
        // cam1 loses its entry behind the engine's back (no event): only a full run repairs it.
        try TestProcess.setup("setfacl", ["-x", "u:\(fx.alice.uid)", "\(cam1)"])
        try Self.recreate(fx, "video0")
        #expect(try !fx.alice.canOpen(cam0, .read))

        let report = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(report.changes.map(\.action) == [.aclAdded])
        #expect(report.changes.map(\.nodePath) == [cam0])
        #expect(report.changes.first?.message.contains("missing") == true)
        #expect(report.problems.isEmpty)
        #expect(try fx.alice.canOpen(cam0, .readWrite))
        #expect(!Self.hasEntry(cam1, fx.alice), "a per-device pass touched another device's node")
        // The record of cam0 is what the full reconcile keeps: it changes cam1 only.
        let full = try fx.engine().reconcile()
        #expect(full.changes.map(\.nodePath) == [cam1])
        #expect(try fx.ledger().aclEntries().map(\.nodePath).sorted() == [cam0, cam1])
        #expect(try fx.engine().reconcile().changedNothing)
    }

    /// A device of several nodes (a sound card: its PCM node and its control node), an
    /// event for one of them: devaccess's own entry on the other is its record, not drift
    /// (hostile review: a pass that read only the event's records called it "unrecorded").
    @Test func aPassOverOneNodeOfADeviceKnowsItsOtherNodesRecords() throws {
        let fx = try EngineFixture("nevcard")
        let pcm = try fx.nodes.makeNullNode("pcmC1D0c")
        let control = try fx.nodes.makeNullNode("controlC1")
        fx.declare(DeclaredDevice(permission: .camera, id: "camera:test-card1", name: "Test card 1", nodes: [
            DeclaredNode(path: pcm, major: 1, minor: 3),
            DeclaredNode(path: control, role: "control", major: 1, minor: 3),
        ]))
        _ = try fx.allow(fx.alice)
        #expect(Self.hasEntry(pcm, fx.alice) && Self.hasEntry(control, fx.alice))
        try Self.recreate(fx, "pcmC1D0c")
        let report = try fx.engine().applyNodes(NodeSelection(paths: [pcm]))
        #expect(report.changes.map(\.nodePath) == [pcm])
        #expect(report.drift.isEmpty, "\(report.drift)")
        #expect(Self.hasEntry(pcm, fx.alice) && Self.hasEntry(control, fx.alice))
        #expect(try fx.engine().reconcile().changedNothing)
    }

    @Test func aDeniedDevicesNewNodeGetsNoEntryAndItsStaleRecordedEntryIsRemoved() throws {
        let fx = try EngineFixture("nevdeny")
        let cam0 = try fx.camera("video0")
        let cam1 = try fx.camera("video1")
        _ = try fx.allow(fx.alice)
        _ = try fx.deny(fx.alice, device: "camera:test-video0")
        #expect(!Self.hasEntry(cam0, fx.alice) && Self.hasEntry(cam1, fx.alice))
        try TestProcess.setup("setfacl", ["-x", "u:\(fx.alice.uid)", "\(cam1)"])

        // Replugged: no entry for a denied device.
        try Self.recreate(fx, "video0")
        let plugged = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(plugged.changes.isEmpty)
        #expect(!Self.hasEntry(cam0, fx.alice))
        #expect(try !fx.alice.canOpen(cam0, .read))

        // A stale entry of devaccess's on it (recorded: the ledger ended the grant, the entry
        // stayed, as a crash between the two leaves it) is removed and its record dropped.
        let ledger = try fx.ledger()
        _ = try ledger.recordACLEntryAdded(NewACLEntry(nodePath: cam0, deviceID: "camera:test-video0", major: 1,
                                                       minor: 3, qualifier: .user(fx.alice.uid),
                                                       permissions: .readWrite, grantID: 1),
                                           by: fx.root, at: fx.clock.now)
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.alice.uid):rw", "\(cam0)"])
        // bob's hand-made entry on the same node is no record of devaccess's: left, and drift.
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.bob.uid):r", "\(cam0)"])
        let changed = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(changed.changes.map(\.action) == [.aclRemoved])
        #expect(changed.changes.map(\.uid) == [fx.alice.uid])
        #expect(!Self.hasEntry(cam0, fx.alice))
        #expect(try !fx.alice.canOpen(cam0, .read))
        #expect(Self.hasEntry(cam0, fx.bob), "an entry devaccess did not make was removed")
        #expect(changed.drift.contains { $0.uid == fx.bob.uid && $0.nodePath == cam0 })
        #expect(try fx.ledger().aclEntries(nodePath: cam0).isEmpty)
        #expect(!Self.hasEntry(cam1, fx.alice), "a per-device pass touched another device's node")
    }

    @Test func anExpiredGrantGetsNoEntryOnTheNewNodeAndEndsEverywhere() throws {
        let fx = try EngineFixture("nevexp")
        let cam0 = try fx.camera("video0")
        let cam1 = try fx.camera("video1")
        let grant = try fx.allow(fx.alice, scope: .duration, expires: fx.clock.now.addingTimeInterval(60)).grant
        #expect(Self.hasEntry(cam1, fx.alice))
        fx.clock.advance(120)
        try Self.recreate(fx, "video0")

        let report = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(!Self.hasEntry(cam0, fx.alice))
        // The expiry is recorded, and the grant's entry elsewhere goes in the same pass (as the
        // full reconcile would): an ended grant keeps no entry anywhere.
        #expect(report.expired.map(\.id) == [grant.id])
        #expect(!Self.hasEntry(cam1, fx.alice))
        #expect(try !fx.alice.canOpen(cam1, .read))
        #expect(try fx.ledger().aclEntries().isEmpty)
        #expect(try fx.engine().reconcile().changedNothing)
    }

    @Test func aRemovedNodeKeepsItsRecordWhileTheGrantStandsAndIsReAddedOnReturn() throws {
        let fx = try EngineFixture("nevrm")
        let cam0 = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        try TestProcess.setup("rm", ["-f", "\(cam0)"])
        let removed = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(removed.changes.isEmpty && removed.problems.isEmpty)
        #expect(try fx.ledger().aclEntries(nodePath: cam0).count == 1)
        _ = try fx.nodes.makeNullNode("video0")
        let back = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(back.changes.map(\.action) == [.aclAdded])
        #expect(try fx.alice.canOpen(cam0, .readWrite))
    }

    /// What stands at the event's path is not the device's node: a hostile user's symlink to
    /// another node, a FIFO, a node with other numbers. Nothing is followed or edited.
    @Test func anEventIsNotFollowedToWhatIsNotTheDevicesNode() throws {
        let fx = try EngineFixture("nevhost")
        let cam0 = try fx.camera("video0")
        let cam1 = try fx.camera("video1")
        _ = try fx.allow(fx.alice)
        let elsewhere = try TemporaryDirectory()
        let target = try elsewhere.makeNullNode("secret")
        let targetBefore = try fx.getfacl(target)

        // A symlink at the device's path, to another node.
        try TestProcess.setup("ln", ["-sf", target, cam0])
        let linked = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(linked.changes.isEmpty)
        #expect(linked.problems.map(\.kind) == [.refused])
        #expect(try fx.getfacl(target) == targetBefore)
        #expect(try !fx.alice.canOpen(target, .read))

        // A FIFO at the path.
        try TestProcess.setup("rm", ["-f", cam0])
        try TestProcess.setup("mkfifo", ["-m", "0600", cam0])
        let fifoBefore = try fx.getfacl(cam0)
        let fifo = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(fifo.changes.isEmpty)
        #expect(fifo.problems.map(\.kind) == [.refused])
        #expect(try fx.getfacl(cam0) == fifoBefore)

        // A character device whose numbers are not the device's (1:5 is /dev/zero's).
        try TestProcess.setup("rm", ["-f", cam0])
        try TestProcess.setup("mknod", ["-m", "0600", cam0, "c", "1", "5"])
        let wrong = try fx.engine().applyNodes(NodeSelection(paths: [cam0]))
        #expect(wrong.changes.isEmpty)
        #expect(wrong.problems.map(\.kind) == [.refused])
        #expect(!Self.hasEntry(cam0, fx.alice))

        // An event naming a path that is no device's node (a link to cam1) changes nothing,
        // not even cam1, whose entry was taken away meanwhile.
        try TestProcess.setup("setfacl", ["-x", "u:\(fx.alice.uid)", "\(cam1)"])
        let alias = elsewhere.path + "/video9"
        try TestProcess.setup("ln", ["-s", "\(cam1)", "\(alias)"])
        let aliased = try fx.engine().applyNodes(NodeSelection(paths: [alias]))
        #expect(aliased.changes.isEmpty && aliased.problems.isEmpty)
        #expect(!Self.hasEntry(cam1, fx.alice))
        #expect(try fx.getfacl(target) == targetBefore)
    }

    /// The selection may name the permission the event's subsystem serves: the other
    /// permissions' devices are not probed, and a node of theirs at that path is not touched.
    @Test func theSelectionsPermissionLimitsThePass() throws {
        let fx = try EngineFixture("nevperm")
        let cam0 = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        try Self.recreate(fx, "video0")
        let other = try fx.engine().applyNodes(NodeSelection(paths: [cam0], permissions: [.microphone]))
        #expect(other.changes.isEmpty)
        #expect(!Self.hasEntry(cam0, fx.alice))
        let own = try fx.engine().applyNodes(NodeSelection(paths: [cam0], permissions: [.camera]))
        #expect(own.changes.map(\.action) == [.aclAdded])
        #expect(Self.hasEntry(cam0, fx.alice))
    }
}
