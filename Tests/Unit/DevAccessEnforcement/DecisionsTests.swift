import Foundation
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger

/// The pure parts: which decision applies, what status gets from the ledger, and drift,
/// from node facts written out by hand (the real-node tests cover the kernel's side).
struct DecisionsTests {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let alice = UserIdentity(uid: 1000, name: "alice", primaryGID: 1000,
                             groups: [GroupRef(gid: 1000, name: "alice"), GroupRef(gid: 44, name: "video")])
    let root = Principal(uid: 0, name: "root")

    private func grant(_ id: Int64, _ decision: Decision, device: String? = nil, permission: Permission = .camera,
                       program: Program? = nil, scope: GrantTerm.Word = .always) -> Grant {
        Grant(id: id, subject: Principal(uid: alice.uid, name: alice.name), program: program, permission: permission,
              deviceID: device, decision: decision, scope: scope, created: start.addingTimeInterval(Double(id)),
              decidedBy: root, method: .admin)
    }

    /// A capture node: root:video 0660 by default, with `acl` entries when given.
    private func device(_ id: String, mode: UInt32 = 0o660, group: UInt32 = 44, acl: [ACLEntry]? = nil) -> Device {
        let facts = NodeFacts(path: "/dev/\(id)", kind: .characterDevice, major: 81, minor: 0, ownerUID: 0,
                              ownerName: "root", groupGID: group, groupName: "video", mode: mode, acl: acl)
        return Device(permission: .camera, id: id, name: id,
                      nodes: [DeviceNode(path: "/dev/\(id)", role: "capture", required: .readWrite, state: .present(facts))])
    }

    private func aclWith(_ entries: [ACLEntry]) -> [ACLEntry] {
        [ACLEntry(tag: .userObject, permissions: .readWrite)] + entries
            + [ACLEntry(tag: .groupObject, permissions: .none), ACLEntry(tag: .mask, permissions: .readWrite),
               ACLEntry(tag: .other, permissions: .none)]
    }

    private func record(_ path: String, grant: Int64?) -> ACLEntryRecord {
        ACLEntryRecord(id: 1, nodePath: path, deviceID: "x", major: 81, minor: 0, qualifier: .user(alice.uid),
                       permissions: .readWrite, grantID: grant, created: start)
    }

    @Test func newestMatchingDecisionWins() {
        let decisions = Decisions(active: [grant(1, .allow, device: "cam1"), grant(2, .deny), grant(3, .allow, device: "cam2")])
        #expect(decisions.decision(uid: alice.uid, permission: .camera, deviceID: "cam1")?.id == 2)
        #expect(decisions.decision(uid: alice.uid, permission: .camera, deviceID: "cam2")?.id == 3)
        #expect(decisions.decision(uid: alice.uid, permission: .microphone, deviceID: "cam2") == nil)
        #expect(decisions.decision(uid: 1001, permission: .camera, deviceID: "cam2") == nil)
    }

    @Test func programAndOnceGrantsAreNotUserWide() {
        let decisions = Decisions(active: [grant(1, .allow, program: Program(path: "/usr/bin/cheese")),
                                           grant(2, .deny, scope: .once)])
        #expect(decisions.grants.isEmpty)
    }

    @Test func wholeDenialMakesTheStatusDeniedEvenWithGroupAccess() {
        let report = AdapterReport(permission: .camera, devices: [device("cam1")])
        let decisions = Decisions(active: [grant(1, .deny)])
        let status = LedgerStatus.evaluate(report, for: alice, ledger: .loaded(LedgerSnapshot(
            path: "/l", decisions: decisions, records: [])))
        #expect(status.status == .denied)
        #expect(status.reasons.first?.message.contains("alice is denied camera: grant 1") == true)
        #expect(status.drift.count == 1)
        #expect(status.drift.first?.message.contains("through group 'video'") == true)
    }

    @Test func oneDeniedCameraDoesNotHideAUsableOne() {
        let report = AdapterReport(permission: .camera, devices: [device("cam1"), device("cam2", mode: 0o600)])
        // cam1 is usable through group video and undecided; cam2 is denied.
        let (inputs, reasons) = Decisions(active: [grant(1, .deny, device: "cam2")]).inputs(user: alice, report: report)
        #expect(inputs.ledgerDenial == nil)
        #expect(reasons.count == 1)
        let (onlyDenied, _) = Decisions(active: [grant(1, .deny, device: "cam1")])
            .inputs(user: alice, report: AdapterReport(permission: .camera, devices: [device("cam1"), device("cam2", mode: 0o600)]))
        #expect(onlyDenied.ledgerDenial != nil)
    }

    @Test func allowsAreListedAndOverriddenOnesSaySo() {
        let report = AdapterReport(permission: .camera, devices: [device("cam1")])
        let (inputs, reasons) = Decisions(active: [grant(1, .allow), grant(2, .allow, device: "gone")])
            .inputs(user: alice, report: report)
        #expect(inputs.ledgerAllows == [nil])
        #expect(reasons.map(\.message).contains { $0.contains("device gone") && $0.contains("not present now") })
        let (_, overridden) = Decisions(active: [grant(1, .allow), grant(2, .deny)]).inputs(user: alice, report: report)
        #expect(overridden.contains { $0.message.contains("grant 1") && $0.message.contains("newer decision overrides") })
    }

    @Test func driftKinds() {
        let own = ACLEntry(tag: .user(alice.uid), permissions: .readWrite)
        func drift(_ decisions: [Grant], _ device: Device, recorded: Bool) -> [DriftItem.Kind] {
            DriftAnalyzer.drift(report: AdapterReport(permission: .camera, devices: [device]), user: alice,
                                decisions: Decisions(active: decisions),
                                records: recorded ? [record(device.nodes[0].path, grant: 1)] : []).map(\.kind)
        }
        let plain = device("cam1", mode: 0o600, group: 0)
        // With an ACL, the mode's group bits are the mask (rw here), as stat() shows them.
        let withEntry = device("cam1", mode: 0o660, group: 0, acl: aclWith([own]))
        #expect(drift([grant(1, .allow)], plain, recorded: false) == [.missingEntry])
        #expect(drift([grant(1, .allow)], plain, recorded: true) == [.missingEntry])
        #expect(drift([grant(1, .allow)], withEntry, recorded: true) == [])
        #expect(drift([grant(1, .allow)], withEntry, recorded: false) == [.unrecordedEntry])
        #expect(drift([], withEntry, recorded: true) == [.staleEntry])
        #expect(drift([], withEntry, recorded: false) == [.entryWithoutGrant])
        #expect(drift([grant(1, .deny)], withEntry, recorded: false) == [.accessDespiteDenial])
        #expect(drift([grant(1, .deny)], plain, recorded: false) == [])
        // A mask that takes write away leaves the entry short of what the grant needs.
        let masked = device("cam1", mode: 0o640, group: 0, acl: [ACLEntry(tag: .userObject, permissions: .readWrite), own,
            ACLEntry(tag: .groupObject, permissions: .none), ACLEntry(tag: .mask, permissions: .read),
            ACLEntry(tag: .other, permissions: .none)])
        #expect(drift([grant(1, .allow)], masked, recorded: true) == [.missingEntry])
        let unusable = Device(permission: .camera, id: "cam1", name: "cam1", nodes: [
            DeviceNode(path: "/dev/cam1", role: "capture", required: .readWrite, state: .unusable("is a symlink"))])
        #expect(drift([grant(1, .allow)], unusable, recorded: false) == [.unenforceable])
    }

    @Test func unreadableAndAbsentLedgersAreReasonsNotFailures() {
        let report = AdapterReport(permission: .camera, devices: [device("cam1", mode: 0o600, group: 0)])
        let unreadable = LedgerStatus.evaluate(report, for: alice, ledger: .unreadable(path: "/l", problem: "corrupt"))
        #expect(unreadable.status == .notDetermined)
        #expect(unreadable.reasons.contains { $0.kind == .ledger && $0.message.contains("corrupt") })
        let absent = LedgerStatus.evaluate(report, for: alice, ledger: .absent(path: "/l"))
        #expect(absent.reasons.contains { $0.kind == .ledger && $0.message.contains("nothing has been decided") })
    }
}
