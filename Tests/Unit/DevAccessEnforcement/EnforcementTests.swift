import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// The engine against real kernel state: nodes from mknod with /dev/null's numbers, users
/// from useradd, ACL edits through libacl, and a child process that really open()s as the
/// user (setpriv). Nothing about access is mocked; only the device list is declared.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users, device nodes and ACLs"))
struct EnforcementTests {
    @Test func grantOpensAndRevokeCloses() throws {
        let fx = try EngineFixture("grant")
        let node = try fx.camera("video0")
        #expect(try !fx.alice.canOpen(node, .readWrite))

        let outcome = try fx.allow(fx.alice)
        #expect(outcome.report.problems.isEmpty)
        #expect(outcome.report.changes.map(\.action) == [.aclAdded])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try !fx.bob.canOpen(node, .read))
        let records = try fx.ledger().aclEntries()
        #expect(records.map(\.nodePath) == [node])
        #expect(records.first?.grantID == outcome.grant.id)
        #expect(try fx.status(fx.alice).status == .authorized)
        #expect(try fx.status(fx.alice).drift.isEmpty)

        let revoked = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(revoked.revoked.map(\.id) == [outcome.grant.id])
        #expect(revoked.report.changes.map(\.action) == [.aclRemoved])
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.ledger().aclEntries().isEmpty)
        // Nothing of devaccess's is left on the node: not even a mask.
        #expect(try fx.acl(node).isEmpty)
        #expect(try fx.status(fx.alice).status == .notDetermined)

        let types = try fx.ledger().events().map(\.event.type)
        #expect(types == [.grant, .aclAdd, .revoke, .aclRemove])
        #expect(try fx.ledger().verify().isIntact)
    }

    @Test func deviceScopedGrantCoversOnlyThatDevice() throws {
        let fx = try EngineFixture("scope")
        let first = try fx.camera("video0")
        let second = try fx.camera("video2")
        _ = try fx.allow(fx.alice, device: "camera:test-video2")
        #expect(try !fx.alice.canOpen(first, .read))
        #expect(try fx.alice.canOpen(second, .readWrite))
        #expect(try fx.status(fx.alice).status == .limited)

        // Revoking another device's grant changes nothing.
        let other = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice), deviceID: "camera:test-video0")
        #expect(other.revoked.isEmpty && other.report.changes.isEmpty)
        #expect(try fx.alice.canOpen(second, .readWrite))
    }

    @Test func unknownDeviceIsRefusedBeforeAnythingIsWritten() throws {
        let fx = try EngineFixture("nodev")
        try fx.camera("video0")
        let before = try fx.ledger().eventCount()
        #expect {
            try fx.allow(fx.alice, device: "camera:no-such")
        } throws: { error in
            guard case EnforcementError.unknownDevice(let id, .camera, let known, _) = error else { return false }
            return id == "camera:no-such" && known == ["camera:test-video0"]
        }
        #expect(try fx.ledger().eventCount() == before)
        #expect(try fx.ledger().grants(includeInactive: true).isEmpty)
    }

    /// The daemon arms its expiry timer from `nextExpiry`. A grant that ran out while a run
    /// was busy with another is no longer standing, but still due: it must be the answer,
    /// or its entry stays until an unrelated run comes by.
    @Test func aGrantThatRanOutUnendedIsTheNextExpiry() throws {
        let fx = try EngineFixture("nextexp")
        try fx.camera("video0")
        let first = try fx.allow(fx.alice, scope: .duration, expires: fx.clock.now.addingTimeInterval(2)).grant
        let second = try fx.allow(fx.bob, scope: .duration, expires: fx.clock.now.addingTimeInterval(5)).grant
        #expect(try fx.engine().nextExpiry() == first.expires)
        fx.clock.advance(3)
        #expect(try fx.engine().nextExpiry() == first.expires, "overdue and not ended: due now")
        _ = try fx.engine().reconcile()
        #expect(try fx.engine().nextExpiry() == second.expires)
        fx.clock.advance(3)
        #expect(try fx.engine().nextExpiry() == second.expires)
        _ = try fx.engine().reconcile()
        #expect(try fx.engine().nextExpiry() == nil)
    }

    /// `grant --for 5s`: the term starts when the engine records the grant, by the engine's
    /// clock. (It was counted from when the CLI parsed it: a slow daemon or a long wait for
    /// the engine shortened the grant by that much.)
    @Test func aGrantForADurationStartsWhenItIsRecorded() throws {
        let fx = try EngineFixture("lasting")
        _ = try fx.camera("video0")
        let typed = fx.clock.now
        fx.clock.advance(2)  // the order's time on its way and in the engine's queue
        let grant = try fx.engine().decide(Enforcer.DecisionRequest(
            subject: fx.principal(fx.alice), permission: .camera, decision: .allow, scope: .duration,
            lastingSeconds: 5)).grant
        // The ledger keeps milliseconds.
        #expect(abs(grant.created.timeIntervalSince(typed) - 2) < 0.001)
        #expect(grant.expires.map { abs($0.timeIntervalSince(grant.created) - 5) < 0.001 } == true)
        // Not both, and not with `always`.
        #expect(throws: EnforcementError.self) {
            try fx.engine().decide(Enforcer.DecisionRequest(
                subject: fx.principal(fx.alice), permission: .camera, decision: .allow, scope: .always,
                lastingSeconds: 5))
        }
        #expect(throws: EnforcementError.self) {
            try fx.engine().decide(Enforcer.DecisionRequest(
                subject: fx.principal(fx.alice), permission: .camera, decision: .allow, scope: .duration,
                expires: fx.clock.now.addingTimeInterval(60), lastingSeconds: 5))
        }
    }

    @Test func expiredGrantIsRemovedWhenTheEngineRuns() throws {
        let fx = try EngineFixture("expiry")
        let node = try fx.camera("video0")
        let grant = try fx.allow(fx.alice, scope: .duration, expires: fx.clock.now.addingTimeInterval(2)).grant
        #expect(try fx.alice.canOpen(node, .readWrite))

        fx.clock.advance(3)
        // Status already says the grant is over, and calls the leftover entry drift.
        let status = try fx.status(fx.alice)
        #expect(status.drift.count == 1)
        #expect(status.drift.first?.message.contains("reconcile") == true)

        let report = try fx.engine().reconcile()
        #expect(report.expired.map(\.id) == [grant.id])
        #expect(report.changes.map(\.action) == [.aclRemoved])
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.status(fx.alice).status == .notDetermined)
        #expect(try fx.ledger().events().map(\.event.type).contains(.expiry))
        // A second run has nothing left to do.
        #expect(try fx.engine().reconcile().changedNothing)
    }

    @Test func grantSurvivesReplugAfterReconcile() throws {
        let fx = try EngineFixture("replug")
        let node = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        #expect(try fx.alice.canOpen(node, .readWrite))

        // Unplug and plug back: the node is a new inode with no ACL.
        try TestProcess.setup("rm", ["-f", node])
        _ = try fx.nodes.makeNullNode("video0")
        #expect(try !fx.alice.canOpen(node, .read))
        #expect(try fx.status(fx.alice).drift.count == 1)

        let report = try fx.engine().reconcile()
        #expect(report.changes.map(\.action) == [.aclAdded])
        #expect(report.changes.first?.message.contains("missing") == true)
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(try fx.ledger().aclEntries().count == 1)
    }

    @Test func unpluggedDeviceKeepsItsRecordUntilItReturns() throws {
        let fx = try EngineFixture("unplug")
        let node = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        try TestProcess.setup("rm", ["-f", node])
        // The device is gone from the list altogether (udev removed it).
        let report = try fx.engine(devices: FixedDeviceSource([])).reconcile()
        #expect(report.changes.isEmpty && report.problems.isEmpty)
        #expect(try fx.ledger().aclEntries().count == 1)
        _ = try fx.nodes.makeNullNode("video0")
        #expect(try fx.engine().reconcile().changes.map(\.action) == [.aclAdded])
        #expect(try fx.alice.canOpen(node, .readWrite))
    }

    @Test func denyIsStickyAndGroupAccessIsDrift() throws {
        let fx = try EngineFixture("deny")
        let crew = try TestGroup("deny", members: [fx.alice])
        let node = try fx.camera("video0", group: crew.name, mode: "0660")
        #expect(try fx.alice.canOpen(node, .readWrite))

        let granted = try fx.allow(fx.alice)
        let denied = try fx.deny(fx.alice)
        #expect(denied.ended.map(\.id) == [granted.grant.id])
        // devaccess's own entry is gone; the group still opens the node, and that is reported.
        #expect(denied.report.changes.map(\.action) == [.aclRemoved])
        #expect(try fx.alice.canOpen(node, .readWrite))
        #expect(denied.report.drift.kinds(for: fx.alice.uid) == [.accessDespiteDenial])
        #expect(denied.report.drift.first?.message.contains("group '\(crew.name)'") == true)

        let status = try fx.status(fx.alice)
        #expect(status.status == .denied)
        #expect(status.drift.count == 1)
        #expect(status.reasons.first?.kind == .ledger)
        #expect(status.reasons.contains(status.drift[0]))
        #expect(try fx.engine().reconcile().drift.kinds(for: fx.alice.uid) == [.accessDespiteDenial])
    }

    @Test func newestDecisionWins() throws {
        let fx = try EngineFixture("newest")
        let first = try fx.camera("video0")
        let second = try fx.camera("video2")
        _ = try fx.deny(fx.alice)
        _ = try fx.allow(fx.alice, device: "camera:test-video2")
        #expect(try !fx.alice.canOpen(first, .read))
        #expect(try fx.alice.canOpen(second, .readWrite))
        #expect(try fx.status(fx.alice).status == .limited)
        // Denying that device again closes it; the whole permission is denied once more.
        _ = try fx.deny(fx.alice, device: "camera:test-video2")
        #expect(try !fx.alice.canOpen(second, .read))
        #expect(try fx.status(fx.alice).status == .denied)
    }

    @Test func newGrantReplacesTheSameScope() throws {
        let fx = try EngineFixture("replace")
        let node = try fx.camera("video0")
        let always = try fx.allow(fx.alice).grant
        let timed = try fx.allow(fx.alice, scope: .duration, expires: fx.clock.now.addingTimeInterval(60))
        #expect(timed.ended.map(\.id) == [always.id])
        #expect(try fx.alice.canOpen(node, .readWrite))
        // The entry stays; its record now names the grant that keeps it.
        #expect(try fx.ledger().aclEntries().map(\.grantID) == [timed.grant.id])
        fx.clock.advance(61)
        _ = try fx.engine().reconcile()
        #expect(try !fx.alice.canOpen(node, .read))
    }

    @Test func resetForgetsDenialsAndRemovesEntries() throws {
        let fx = try EngineFixture("reset")
        let node = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        let reset = try fx.engine().reset(subject: fx.principal(fx.alice))
        #expect(reset.deleted.count == 1)
        #expect(reset.report.changes.map(\.action) == [.aclRemoved])
        #expect(try !fx.alice.canOpen(node, .read))
        _ = try fx.deny(fx.alice)
        #expect(try fx.status(fx.alice).status == .denied)
        _ = try fx.engine().reset(subject: fx.principal(fx.alice), permission: .camera)
        #expect(try fx.status(fx.alice).status == .notDetermined)
        #expect(try fx.ledger().verify().isIntact)
    }

    @Test func foreignEntriesAreNeverRemoved() throws {
        let fx = try EngineFixture("foreign")
        let node = try fx.camera("video0")
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.bob.name):rw", node])
        let before = try fx.getfacl(node)

        _ = try fx.allow(fx.alice)
        _ = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        _ = try fx.engine().reset(subject: fx.principal(fx.bob))
        let report = try fx.engine().reconcile()
        #expect(try fx.getfacl(node) == before)
        #expect(try fx.bob.canOpen(node, .readWrite))
        #expect(report.drift.kinds(for: fx.bob.uid) == [.entryWithoutGrant])
        #expect(report.changes.isEmpty)
    }

    @Test func grantedUsersOwnHandMadeEntryIsLeftAlone() throws {
        let fx = try EngineFixture("handmade")
        let node = try fx.camera("video0")
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.alice.name):r", node])
        let before = try fx.getfacl(node)
        let outcome = try fx.allow(fx.alice)
        // Not widened, not recorded: devaccess did not make it.
        #expect(try fx.getfacl(node) == before)
        #expect(try fx.ledger().aclEntries().isEmpty)
        #expect(outcome.report.drift.kinds(for: fx.alice.uid) == [.unrecordedEntry])
        #expect(try fx.status(fx.alice).status == .notDetermined)
        _ = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(try fx.getfacl(node) == before)
        #expect(try fx.alice.canOpen(node, .read))
    }

    @Test func plantedSymlinkAndFileAreRefused() throws {
        let fx = try EngineFixture("planted")
        let target = try fx.nodes.makeNullNode("target")
        let targetBefore = try fx.getfacl(target)
        let link = fx.nodes.path + "/video0"
        try TestProcess.setup("ln", ["-s", target, link])
        let file = fx.nodes.path + "/video1"
        try TestProcess.setup("install", ["-m", "0600", "/dev/null", file])
        for (name, path) in [("video0", link), ("video1", file)] {
            fx.declare(DeclaredDevice(permission: .camera, id: "camera:test-\(name)", name: name,
                                      nodes: [DeclaredNode(path: path, major: 1, minor: 3)]))
        }
        let outcome = try fx.allow(fx.alice)
        #expect(outcome.report.problems.map(\.kind) == [.refused, .refused])
        #expect(outcome.report.problems.map(\.nodePath) == [link, file])
        #expect(outcome.report.changes.isEmpty)
        #expect(try fx.getfacl(target) == targetBefore)
        #expect(try fx.acl(file).isEmpty)
        #expect(try !fx.alice.canOpen(link, .read))
        #expect(try fx.ledger().aclEntries().isEmpty)
        #expect(try fx.ledger().events().filter { $0.event.type == .refused }.count == 2)
    }

    /// The node passes the probe, then is swapped for a symlink before the edit: ACLWriter's
    /// own check through the O_PATH descriptor refuses, and the intent record is undone.
    @Test func nodeSwappedAfterTheProbeIsRefused() throws {
        let fx = try EngineFixture("swap")
        let node = try fx.camera("video0")
        let stale = DeclaredDeviceSource(devices: try #require(Optional(fx.declared))).report(for: .camera)
        let target = try fx.nodes.makeNullNode("target")
        let targetBefore = try fx.getfacl(target)
        try TestProcess.setup("ln", ["-sf", target, node])

        let outcome = try fx.allow(fx.alice, engine: try fx.engine(devices: FixedDeviceSource([stale])))
        #expect(outcome.report.problems.map(\.kind) == [.refused])
        #expect(outcome.report.problems.first?.message.contains("symlink") == true)
        #expect(try fx.getfacl(target) == targetBefore)
        #expect(try fx.ledger().aclEntries().isEmpty)
        let types = try fx.ledger().events().map(\.event.type)
        #expect(types == [.grant, .aclAdd, .aclRemove, .refused])
    }

    @Test func recordedNodeReplacedBySymlinkIsLeftUntouchedOnRevoke() throws {
        let fx = try EngineFixture("swaprev")
        let node = try fx.camera("video0")
        _ = try fx.allow(fx.alice)
        let target = try fx.nodes.makeNullNode("target")
        let targetBefore = try fx.getfacl(target)
        try TestProcess.setup("ln", ["-sf", target, node])
        let revoked = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice))
        #expect(revoked.report.problems.map(\.kind) == [.refused])
        #expect(try fx.getfacl(target) == targetBefore)
        #expect(try fx.ledger().aclEntries().isEmpty)
    }

    @Test func sharedControlNodeStaysWhileAnotherDeviceNeedsIt() throws {
        let fx = try EngineFixture("shared")
        let control = try fx.nodes.makeNullNode("controlC0")
        let pcm0 = try fx.nodes.makeNullNode("pcmC0D0c")
        let pcm1 = try fx.nodes.makeNullNode("pcmC0D1c")
        for (index, pcm) in [pcm0, pcm1].enumerated() {
            fx.declare(DeclaredDevice(permission: .camera, id: "camera:test-pcm\(index)", name: "pcm\(index)", nodes: [
                DeclaredNode(path: pcm, major: 1, minor: 3),
                DeclaredNode(path: control, role: "control", major: 1, minor: 3),
            ]))
        }
        _ = try fx.allow(fx.alice, device: "camera:test-pcm0")
        _ = try fx.allow(fx.alice, device: "camera:test-pcm1")
        #expect(try fx.ledger().aclEntries().count == 3)
        _ = try fx.engine().revoke(permission: .camera, subject: fx.principal(fx.alice), deviceID: "camera:test-pcm0")
        #expect(try !fx.alice.canOpen(pcm0, .read))
        #expect(try fx.alice.canOpen(pcm1, .readWrite))
        #expect(try fx.alice.canOpen(control, .readWrite))
    }

    @Test func locationGrantIsRecordedWithoutNodes() throws {
        let fx = try EngineFixture("location")
        let outcome = try fx.engine().decide(Enforcer.DecisionRequest(
            subject: fx.principal(fx.alice), permission: .location, decision: .allow, scope: .always))
        #expect(outcome.report.changes.isEmpty)
        #expect(outcome.report.notes.contains { $0.contains("gpsd") })
        #expect(try fx.engine().reconcile().notes.contains { $0.contains("location") })
    }
}

extension EnforcementTests {
    /// A `reject --deny` of a request already resolved (an approval won the race) writes
    /// nothing and says why: it is not a ledger failure, so it takes nobody's access away
    /// and leaves no "unrecorded" denial to be written later (the hostile review's note).
    @Test func denyingARequestAlreadyResolvedTakesNothingAway() throws {
        let fixture = try EngineFixture("resolved")
        let node = try fixture.camera("video0")
        let engine = try fixture.engine()
        let subject = fixture.principal(fixture.alice)
        let queued = try fixture.ledger().queueRequest(NewPendingRequest(subject: subject, permissions: [.camera],
                                                                         scope: .always))
        let allow = Enforcer.DecisionRequest(subject: subject, permission: .camera, decision: .allow, scope: .always)
        _ = try engine.resolve(queued.id, as: .approved, decisions: [allow], note: "approved")
        #expect(try fixture.alice.canOpen(node, .read))

        let deny = Enforcer.DecisionRequest(subject: subject, permission: .camera, decision: .deny, scope: .always)
        #expect(throws: EnforcementError.self) {
            try engine.resolve(queued.id, as: .rejected, decisions: [deny], note: "too late")
        }
        #expect(try fixture.alice.canOpen(node, .read), "a refused late denial took the standing grant's access away")
        #expect(try fixture.ledger().grants(uid: fixture.alice.uid).map(\.decision) == [.allow])
    }
}
