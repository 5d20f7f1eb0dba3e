import Foundation
import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

struct ReplyCodingTests {
    /// A status with every shape the model has: ACL with named entries and a mask, a
    /// group-class decision with masked bits, an unusable node, a service route, drift.
    static let richStatus: [PermissionStatus] = {
        let acl = [
            ACLEntry(tag: .userObject, permissions: .readWrite),
            ACLEntry(tag: .user(1000), permissions: .readWrite, qualifierName: "alice"),
            ACLEntry(tag: .groupObject, permissions: .readWrite),
            ACLEntry(tag: .group(44), permissions: [.read, .write, .execute], qualifierName: "video"),
            ACLEntry(tag: .mask, permissions: .read),
            ACLEntry(tag: .other, permissions: .none),
        ]
        let facts = NodeFacts(path: "/dev/video0", kind: .characterDevice, major: 81, minor: 0, ownerUID: 0,
                              ownerName: "root", groupGID: 44, groupName: "video", mode: 0o660, acl: acl)
        let capture = DeviceNode(path: "/dev/video0", role: "capture", required: .readWrite, state: .present(facts))
        let gone = DeviceNode(path: "/dev/video2", role: "capture", required: .readWrite, state: .unusable("vanished"))
        let camera = Device(permission: .camera, id: "camera:pci-0000:00:14.0-usb-0:1:1.0-video-index0",
                            name: "Integrated \"HD\" Camera", driver: "uvcvideo", bus: "usb-0000:00:14.0-1",
                            nodes: [capture, gone], details: ["card": "UVC", "capabilities": "capture"])
        let cameraStatus = DeviceStatus(device: camera, nodes: [
            NodeStatus(node: capture, evaluation: AccessEvaluator.Result(
                access: .read, decidedBy: .groupClass(matching: [44, 1000]), maskedOut: .write)),
            NodeStatus(node: gone, evaluation: nil),
        ], usable: false)
        let receiver = DeviceNode(path: "/dev/ttyACM0", role: "receiver", required: .read, state: .present(
            NodeFacts(path: "/dev/ttyACM0", kind: .characterDevice, major: 166, minor: 0, ownerUID: 0,
                      groupGID: 20, mode: 0o660)))
        let gps = Device(permission: .location, id: "location:gpsd:/dev/ttyACM0", name: "u-blox 7", nodes: [receiver],
                         route: .service(ServiceAccess(name: "gpsd", endpoint: "127.0.0.1:2947", openToAllLocalUsers: true)))
        return [
            PermissionStatus(permission: .camera, status: .notDetermined, devices: [cameraStatus],
                             reasons: [Reason(.summary, "alice cannot open any camera device"), Reason(.access, "é ✓\n")],
                             drift: [Reason(.drift, "ACL entry user:alice:rw- nobody granted")]),
            PermissionStatus(permission: .microphone, status: .unavailable, devices: [],
                             reasons: [Reason(.unavailable, "no sound cards")]),
            PermissionStatus(permission: .location, status: .authorized, devices: [
                DeviceStatus(device: gps, nodes: [NodeStatus(node: receiver, evaluation: AccessEvaluator.Result(
                    access: .none, decidedBy: .other))], usable: true),
            ], reasons: [Reason(.service, "gpsd serves everyone")]),
            PermissionStatus(permission: .camera, status: .authorized, devices: [
                DeviceStatus(device: Device(permission: .camera, id: "c", name: "n", nodes: [capture]), nodes: [
                    NodeStatus(node: capture, evaluation: AccessEvaluator.Result(access: .readWrite, decidedBy: .superuser)),
                ], usable: true),
                DeviceStatus(device: Device(permission: .camera, id: "d", name: "n", nodes: [capture]), nodes: [
                    NodeStatus(node: capture, evaluation: AccessEvaluator.Result(access: .readWrite, decidedBy: .namedUser(uid: 7))),
                ], usable: true),
                DeviceStatus(device: Device(permission: .camera, id: "e", name: "n", nodes: [capture]), nodes: [
                    NodeStatus(node: capture, evaluation: AccessEvaluator.Result(access: .readWrite, decidedBy: .owner)),
                ], usable: true),
                // Read-only and write-only opens pass, read-write does not (issue 27, item 9).
                DeviceStatus(device: Device(permission: .camera, id: "f", name: "n", nodes: [capture]), nodes: [
                    NodeStatus(node: capture, evaluation: AccessEvaluator.Result(
                        access: .read, decidedBy: .groupClass(matching: [44]), separately: .readWrite)),
                ], usable: false),
            ], reasons: []),
        ]
    }()

    @Test func statusRepliesRoundTripExactly() throws {
        let envelope = ReplyEnvelope(id: 12, reply: .status(StatusReply(user: "alice", uid: 1000,
                                                                        permissions: Self.richStatus)))
        let line = MessageCodec.encode(envelope)
        #expect(!line.contains(0x0a))
        #expect(try MessageCodec.decodeReply(line) == envelope)
    }

    @Test func helloAndErrorRepliesRoundTrip() throws {
        let hello = ReplyEnvelope(id: 1, reply: .hello(HelloReply(server: "devaccessd 0.1.0", peer: PeerInfo(
            uid: 1000, gid: 1000, pid: 4242, groups: [44, 29], user: "alice", program: "/usr/bin/python3.11", admin: false))))
        #expect(try MessageCodec.decodeReply(MessageCodec.encode(hello)) == hello)
        // hello tells the one version this side speaks, so a later one can be negotiated.
        #expect(String(decoding: MessageCodec.encode(hello), as: UTF8.self)
                    .hasPrefix(#"{"version":1,"id":1,"type":"hello","server":"devaccessd 0.1.0","versions":[1],"peer":"#))
        let anonymous = ReplyEnvelope(id: 2, reply: .hello(HelloReply(server: "x", peer: PeerInfo(
            uid: 0, gid: 0, pid: 1, groups: [], user: nil, program: nil, admin: true))))
        #expect(try MessageCodec.decodeReply(MessageCodec.encode(anonymous)) == anonymous)
        let error = ReplyEnvelope(id: 0, reply: .error(ProtocolError(.tooLarge, context: "message", reason: "too long")))
        #expect(try MessageCodec.decodeReply(MessageCodec.encode(error)) == error)
    }

    @Test func errorFrameHasTheDocumentedShape() {
        let line = MessageCodec.encode(ReplyEnvelope(id: 7, reply: .error(ProtocolError(
            .permissionDenied, context: "status", reason: "only admins"))))
        #expect(String(decoding: line, as: UTF8.self)
                == #"{"version":1,"id":7,"type":"error","code":"permission-denied","context":"status","reason":"only admins"}"#)
        // A reply takes the version of the request it answers.
        let answered = MessageCodec.encode(ReplyEnvelope(id: 7, reply: .error(ProtocolError(
            .permissionDenied, context: "status", reason: "only admins")), version: BrokerProtocol.version))
        #expect(String(decoding: answered, as: UTF8.self).hasPrefix(#"{"version":1,"id":7,"#))
    }

    @Test func repliesAreDecodedStrictlyToo() {
        func code(_ text: String) -> ErrorCode? {
            do {
                _ = try MessageCodec.decodeReply(Array(text.utf8))
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(#"{"version":1,"id":1,"type":"error","code":"x","context":"c","reason":"r","extra":1}"#) == .badMessage)
        #expect(code(#"{"version":9,"id":1,"type":"error","code":"x","context":"c","reason":"r"}"#) == .unsupportedVersion)
        // A reply in another version is refused before it is read.
        #expect(code(#"{"version":2,"id":1,"type":"queued","pending":1,"permissions":["camera"],"new":true,"waiting":false}"#)
                == .unsupportedVersion)
        #expect(code(#"{"version":1,"id":1,"type":"status","user":"a","uid":-1,"permissions":[]}"#) == .badMessage)
        #expect(code(#"{"version":1,"id":1,"type":"status","user":"a","uid":1,"permissions":[{"permission":"camera","status":"maybe","devices":[],"reasons":[],"drift":[]}]}"#) == .badMessage)
        // An unknown key deep inside a node's facts.
        var line = String(decoding: MessageCodec.encode(ReplyEnvelope(id: 3, reply: .status(StatusReply(
            user: "a", uid: 1, permissions: Self.richStatus)))), as: UTF8.self)
        line = line.replacingFirst(#""kind":"characterDevice""#, with: #""kind":"characterDevice","inode":5"#)
        #expect(code(line) == .badMessage)
        // A node with both facts and a problem.
        var both = String(decoding: MessageCodec.encode(ReplyEnvelope(id: 3, reply: .status(StatusReply(
            user: "a", uid: 1, permissions: Self.richStatus)))), as: UTF8.self)
        both = both.replacingFirst(#""role":"capture","#, with: #""role":"capture","problem":"x","#)
        #expect(code(both) == .badMessage)
        #expect(code(#"{"version":1,"id":1,"type":"teleport"}"#) == .unknownType)
    }

    @Test func writerEscapesEverythingJSONNeeds() throws {
        let text = "\"\\/\u{0}\u{1}\u{1f}\u{7f}\n\r\té😀"
        let bytes = JSONWriter.bytes(.string(text))
        #expect(String(decoding: bytes, as: UTF8.self) == #""\"\\/\u0000\u0001\u001f\u007f\n\r\té😀""#)
        #expect(!bytes.contains(0x0a))
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = range(of: target) else { return self }
        return replacingCharacters(in: range, with: replacement)
    }
}
