import Testing
@testable import DevAccessCore

struct StatusEvaluatorTests {
    let alice = UserIdentity(uid: 1000, name: "alice", primaryGID: 1000,
                             groups: [GroupRef(gid: 1000, name: "alice"), GroupRef(gid: 44, name: "video")])

    func camera(_ id: String, mode: UInt32, group: UInt32 = 44, acl: [ACLEntry]? = nil) -> Device {
        let facts = NodeFacts(path: "/dev/\(id)", kind: .characterDevice, major: 81, minor: 0,
                              ownerUID: 0, ownerName: "root", groupGID: group, groupName: "video", mode: mode, acl: acl)
        return Device(permission: .camera, id: id, name: id,
                      nodes: [DeviceNode(path: "/dev/\(id)", role: "capture", required: .readWrite, state: .present(facts))])
    }

    @Test func noDevicesIsUnavailable() {
        let status = StatusEvaluator.evaluate(AdapterReport(permission: .camera, devices: []), for: alice)
        #expect(status.status == .unavailable)
        #expect(status.reasons.first?.kind == .unavailable)
    }

    @Test func adapterFailureIsUnavailableWithItsReason() {
        let report = AdapterReport(permission: .location, devices: [], unavailableReason: "gpsd is not running")
        let status = StatusEvaluator.evaluate(report, for: alice)
        #expect(status.status == .unavailable)
        #expect(status.reasons.first?.message == "gpsd is not running")
    }

    @Test func allOpenIsAuthorizedAndNamesTheGroup() {
        let report = AdapterReport(permission: .camera, devices: [camera("video0", mode: 0o660)])
        let status = StatusEvaluator.evaluate(report, for: alice)
        #expect(status.status == .authorized)
        #expect(status.reasons.contains { $0.kind == .access && $0.message.contains("member of group 'video'") })
    }

    @Test func someOpenIsLimited() {
        let report = AdapterReport(permission: .camera, devices: [camera("video0", mode: 0o660),
                                                                  camera("video2", mode: 0o660, group: 99)])
        let status = StatusEvaluator.evaluate(report, for: alice)
        #expect(status.status == .limited)
        #expect(status.devices.map(\.usable) == [true, false])
    }

    @Test func readOnlyIsNotEnoughForACamera() {
        let report = AdapterReport(permission: .camera, devices: [camera("video0", mode: 0o640)])
        let status = StatusEvaluator.evaluate(report, for: alice)
        #expect(status.status == .notDetermined)
        #expect(status.reasons.contains { $0.message.contains("has read, needs readwrite") })
    }

    @Test func vanishedNodeIsNotUsable() {
        var device = camera("video0", mode: 0o666)
        device.nodes[0].state = .unusable("/dev/video0 no longer exists")
        let status = StatusEvaluator.evaluate(AdapterReport(permission: .camera, devices: [device]), for: alice)
        #expect(status.status == .notDetermined)
        #expect(status.reasons.contains { $0.message.contains("no longer exists") })
    }

    @Test func policyRestrictionWinsOverLedgerAndAccess() {
        let report = AdapterReport(permission: .camera, devices: [camera("video0", mode: 0o666)])
        let inputs = DecisionInputs(ledgerDenial: Reason(.ledger, "denied"), policyRestriction: Reason(.policy, "no"))
        #expect(StatusEvaluator.evaluate(report, for: alice, inputs: inputs).status == .restricted)
        #expect(StatusEvaluator.evaluate(report, for: alice,
                                         inputs: DecisionInputs(ledgerDenial: Reason(.ledger, "d"))).status == .denied)
    }

    @Test func openServiceMakesLocationAuthorized() {
        let device = Device(permission: .location, id: "location:gpsd:/dev/ttyACM0", name: "GPS",
                            nodes: [], route: .service(ServiceAccess(name: "gpsd", endpoint: "127.0.0.1:2947",
                                                                     openToAllLocalUsers: true)))
        let status = StatusEvaluator.evaluate(AdapterReport(permission: .location, devices: [device]), for: alice)
        #expect(status.status == .authorized)
    }

    @Test func allowedButClosedSaysSoInsteadOfNothingDecided() {
        let report = AdapterReport(permission: .camera, devices: [camera("video0", mode: 0o600)])
        let status = StatusEvaluator.evaluate(report, for: alice, inputs: DecisionInputs(ledgerAllows: [nil]))
        #expect(status.status == .notDetermined)
        #expect(status.reasons.first?.message.contains("although the ledger allows it") == true)
        #expect(status.reasons.first?.message.contains("nothing has been decided") == false)
    }
}
