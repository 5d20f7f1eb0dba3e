import Foundation
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessEngine
import DevAccessInterface

/// `OpenPlan`: what devaccessd opens for whom, decided without a daemon from what was read.
struct OpenPlanTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)
    static let alice = UserIdentity(uid: 1000, name: "alice", primaryGID: 1000, groups: [GroupRef(gid: 1000, name: "alice")])
    static let root = Principal(uid: 0, name: "root")
    static let caller = "alice (uid 1000, pid 42)"

    static func node(_ path: String, present: Bool = true) -> DeviceNode {
        let facts = NodeFacts(path: path, kind: .characterDevice, major: 81, minor: 3, ownerUID: 0, groupGID: 44,
                              mode: 0o660)
        return DeviceNode(path: path, role: "capture", required: .readWrite,
                          state: present ? .present(facts) : .unusable("gone"))
    }

    static let camera = Device(permission: .camera, id: "usb-cam", name: "Cam",
                               nodes: [node("/dev/video0"), node("/dev/video1")])

    static func grant(_ id: Int64, _ decision: Decision, expires: Date? = nil, revoked: Date? = nil) -> Grant {
        Grant(id: id, subject: Principal(uid: alice.uid, name: alice.name), permission: .camera, deviceID: "usb-cam",
              decision: decision, scope: expires == nil ? .always : .duration, created: start.addingTimeInterval(Double(id)),
              expires: expires, revoked: revoked, decidedBy: root, method: .admin)
    }

    static func status(_ status: AuthorizationStatus, usable: Bool = false) -> PermissionStatus {
        PermissionStatus(permission: .camera, status: status,
                         devices: [DeviceStatus(device: camera, nodes: [], usable: usable)], reasons: [])
    }

    static func decide(_ order: OpenOrder, devices: [Device] = [camera], status: PermissionStatus? = status(.notDetermined),
                       active: [Grant] = [], switchedOff: PrivacySwitch? = nil) -> OpenPlan.Outcome {
        OpenPlan.decide(order, for: alice, caller: caller,
                        inputs: OpenPlan.Inputs(devices: devices, status: status, active: active, switchedOff: switchedOff))
    }

    static func reason(_ outcome: OpenPlan.Outcome) -> String {
        switch outcome {
        case .refused(let reason): return "refused: " + reason
        case .badArgument(let reason): return "bad argument: " + reason
        case .open(_, let node, _, let access, let grant):
            return "open \(node.path) \(access.symbolic) on " + (grant.map { "grant \($0.id)" } ?? "own access")
        }
    }

    @Test func aGrantOpensTheFirstNodeWithTheAccessItNeeds() {
        let outcome = Self.decide(OpenOrder(permission: .camera, device: "usb-cam"), active: [Self.grant(5, .allow)])
        #expect(Self.reason(outcome) == "open /dev/video0 rw- on grant 5")
    }

    @Test func ownAccessOpensWithoutAGrantButADenialOutweighsIt() {
        let order = OpenOrder(permission: .camera, device: "usb-cam", node: "/dev/video1", access: .read)
        #expect(Self.reason(Self.decide(order, status: Self.status(.authorized, usable: true)))
            == "open /dev/video1 r-- on own access")
        let denied = Self.decide(order, status: Self.status(.authorized, usable: true), active: [Self.grant(6, .deny)])
        #expect(Self.reason(denied).hasPrefix("refused: \(Self.caller) is denied camera on device 'usb-cam' ("))
    }

    @Test func withoutGrantOrOwnAccessNothingOpens() {
        let outcome = Self.decide(OpenOrder(permission: .camera, device: "usb-cam"))
        #expect(Self.reason(outcome) == "refused: \(Self.caller) holds no grant for camera on device 'usb-cam'; "
            + "request it first (DeviceAccess.request, 'devaccess request camera')")
    }

    @Test func theSwitchAndThePolicyComeBeforeAnyGrant() {
        let order = OpenOrder(permission: .camera, device: "usb-cam")
        let off = PrivacySwitch(permission: .camera, hard: false, by: Self.root, since: Self.start, reason: "meeting")
        #expect(Self.reason(Self.decide(order, active: [Self.grant(5, .allow)], switchedOff: off))
            == "refused: camera is switched off for everyone: meeting")
        #expect(Self.reason(Self.decide(order, status: Self.status(.restricted), active: [Self.grant(5, .allow)]))
            == "refused: the policy forbids camera for alice; nothing was opened")
    }

    @Test func onlyTheDevicesOwnNodesAndNoMoreAccessThanTheyNeed() {
        let other = Self.decide(OpenOrder(permission: .camera, device: "usb-cam", node: "/etc/shadow"),
                                active: [Self.grant(5, .allow)])
        #expect(Self.reason(other) == "bad argument: '/etc/shadow' is not a node of device 'usb-cam'; its nodes: "
            + "/dev/video0, /dev/video1")
        let absent = Self.decide(OpenOrder(permission: .camera, device: "other"), active: [Self.grant(5, .allow)])
        #expect(Self.reason(absent) == "bad argument: no camera device 'other' is present; 'status' lists the devices")
        let readOnly = Device(permission: .camera, id: "usb-cam", name: "Cam",
                              nodes: [DeviceNode(path: "/dev/video0", role: "capture", required: .read,
                                                 state: Self.node("/dev/video0").state)])
        let more = Self.decide(OpenOrder(permission: .camera, device: "usb-cam", access: .readWrite), devices: [readOnly],
                               active: [Self.grant(5, .allow)])
        #expect(Self.reason(more) == "bad argument: /dev/video0 is used with r-- access; 'rw-' is more than it needs")
        let gone = Device(permission: .camera, id: "usb-cam", name: "Cam", nodes: [Self.node("/dev/video0", present: false)])
        #expect(Self.reason(Self.decide(OpenOrder(permission: .camera, device: "usb-cam"), devices: [gone],
                                        active: [Self.grant(5, .allow)]))
            == "bad argument: /dev/video0 cannot be examined now; nothing was opened")
    }

    @Test func endedAndWithheldGrantsAreNotInForce() {
        let now = Self.start.addingTimeInterval(100)
        let grants = [Self.grant(1, .allow), Self.grant(2, .allow, expires: Self.start), Self.grant(3, .allow, revoked: Self.start),
                      Self.grant(4, .allow)]
        #expect(OpenPlan.activeGrants(grants, withheld: [4], now: now).map(\.id) == [1])
    }
}

/// `LocationPlan`: the level a position is served at.
struct LocationPlanTests {
    static let alice = Principal(uid: 1000, name: "alice")

    @Test func theHeldLevelServesAndNothingFinerIsServed() {
        #expect(LocationPlan.level(asked: nil, held: .street, subject: Self.alice) == .serve(.street))
        #expect(LocationPlan.level(asked: .city, held: .street, subject: Self.alice) == .serve(.city))
        #expect(LocationPlan.level(asked: .street, held: .street, subject: Self.alice) == .serve(.street))
        guard case .refused(let reason) = LocationPlan.level(asked: .exact, held: .city, subject: Self.alice) else {
            Issue.record("a finer level than held was served")
            return
        }
        #expect(reason.hasPrefix("alice's location grant is at city accuracy ("))
        #expect(reason.hasSuffix("not exact; ask for more with 'devaccess request location --accuracy exact'"))
    }

    @Test func aLevelLoweredWhileWaitingIsTheOneServed() {
        #expect(LocationPlan.lowered(serving: .exact, heldNow: .city) == .city)
        #expect(LocationPlan.lowered(serving: .city, heldNow: .exact) == nil)
        #expect(LocationPlan.lowered(serving: .city, heldNow: .city) == nil)
    }
}
