import Foundation
import Glibc
import Testing
import DevAccessEngine
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// Hostile review L2, for approvals, in the engine (`ApprovalPlan.resolve`): an approval reads the policy when it
/// comes in (for the terms, the caps and what is restricted), then waits its turn on the
/// enforcement queue; an administrator may edit the policy in between, and the engine
/// applies the policy as it is when it records. Here the broker's reading allows camera and
/// microphone and the engine's forbids the microphone (the edit made while the approval
/// waited): the camera is granted, the microphone alone is `restricted`, saying why, and
/// the request is resolved.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users, device nodes and ACLs"))
struct ApprovalPolicyRaceTests {
    static func parse(_ text: String) throws -> Policy {
        try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf", text: text)])
    }

    @Test func aPermissionForbiddenWhileTheApprovalWaitedIsRestrictedAlone() throws {
        let nodes = try TemporaryDirectory()
        let camera = try nodes.makeNullNode("video0", mode: "0600")
        let microphone = try nodes.makeNullNode("pcmC0D0c", mode: "0600")
        let state = try TemporaryDirectory()
        let alice = try TestUser("aprace")
        let ledger = try Ledger(path: state.path + "/ledger.db", journal: .disabled)
        let asRead = try Self.parse("[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n")
        let inForce = try Self.parse("[camera]\nDefault=auth_admin\n[microphone]\nDefault=deny\n")
        let root = Principal(uid: 0, name: "root")
        let engine = Enforcer(ledger: ledger, devices: DeclaredDeviceSource(devices: [
            DeclaredDevice(permission: .camera, id: "camera:test-race", name: "Race camera",
                           nodes: [DeclaredNode(path: camera, major: 1, minor: 3)]),
            DeclaredDevice(permission: .microphone, id: "microphone:test-race", name: "Race microphone",
                           nodes: [DeclaredNode(path: microphone, major: 1, minor: 3)]),
        ]), actor: root, policy: { .loaded(inForce) })
        let subject = Principal(uid: alice.uid, name: alice.name)
        let queued = try ledger.queueRequest(NewPendingRequest(subject: subject, permissions: [.camera, .microphone],
                                                               scope: .always, reason: "lab"))

        let resolving: ApprovalPlan.Resolving
        do {
            (resolving, _) = try ApprovalPlan.resolve(queued.id, verdict: .approve(nil), note: "ok", admin: root,
                                                      policy: asRead, enforcer: engine)
        } catch {
            Issue.record("the approval failed as a whole, the camera with the microphone: \(error)")
            #expect(try alice.canOpen(camera, .readWrite), "the camera's approval was lost with the microphone's")
            return
        }
        guard case .done(let request, let results) = resolving else {
            Issue.record("the approval was not done: \(resolving)")
            return
        }
        #expect(request.resolution == .approved)
        #expect(try ledger.pendingRequests().isEmpty, "the request is resolved, not left waiting")
        #expect(results.map(\.permission) == [.camera, .microphone])
        #expect(results.map(\.outcome) == [.granted, .restricted], "\(results)")
        let refusal = results.last?.message ?? ""
        #expect(refusal.contains("policy forbids microphone") && refusal.contains("nothing was granted"), "\(refusal)")
        #expect(results.last?.grant == nil)
        #expect(try alice.canOpen(camera, .readWrite))
        #expect(try !alice.canOpen(microphone, .read))
        let grants = try ledger.grants(uid: alice.uid, includeInactive: true)
        #expect(grants.map(\.permission) == [.camera] && grants.first?.method == .admin, "\(grants)")
        #expect(try ledger.verify().isIntact)
    }
}
