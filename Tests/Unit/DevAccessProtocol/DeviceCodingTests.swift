import Testing
import DevAccessCore
@testable import DevAccessProtocol
import DevAccessInterface

/// `devaccess devices --json`: a device without a status is the wire's device object minus
/// `usable` and the nodes' `evaluation` (one encoder for both); strict the other way too.
struct DeviceCodingTests {
    static var reports: [AdapterReport] {
        let statuses = ReplyCodingTests.richStatus
        return [
            AdapterReport(permission: .camera, devices: statuses[0].devices.map(\.device),
                          notes: [Reason(.skipped, "/dev/video1: not a video capture node (video_output)")]),
            AdapterReport(permission: .microphone, devices: [], unavailableReason: "no sound cards"),
            AdapterReport(permission: .location, devices: statuses[2].devices.map(\.device)),
        ]
    }

    private func text(_ value: JSONValue) -> String { JSONWriter.string(value) }

    @Test func reportsRoundTripExactly() throws {
        for report in Self.reports {
            let value = try JSONParser.parse(JSONWriter.bytes(ModelCoding.encode(report)))
            #expect(try ModelCoding.decodeAdapterReport(value, path: "report") == report)
        }
    }

    @Test func aDeviceIsItsStatusWithoutUsableAndEvaluations() throws {
        for permission in ReplyCodingTests.richStatus {
            for status in permission.devices {
                guard case .object(var members) = ModelCoding.encode(status) else {
                    Issue.record("not an object")
                    continue
                }
                members.removeAll { $0.key == "usable" }
                members = members.map { member in
                    guard member.key == "nodes", case .array(let nodes) = member.value else { return member }
                    return JSONMember("nodes", .array(nodes.map { node in
                        guard case .object(let fields) = node else { return node }
                        return .object(fields.filter { $0.key != "evaluation" })
                    }))
                }
                #expect(ModelCoding.encode(status.device) == .object(members))
            }
        }
        let device = try #require(Self.reports.first?.devices.first)
        #expect(!text(ModelCoding.encode(device)).contains("\"usable\""))
        #expect(!text(ModelCoding.encode(device)).contains("\"evaluation\""))
    }

    @Test func aDeviceWithAStatusIsNoDevice() throws {
        let status = try #require(ReplyCodingTests.richStatus.first?.devices.first)
        // `usable` is a status's: an unknown field for a device alone.
        #expect(throws: ProtocolError.self) {
            try ModelCoding.decodeDevice(ModelCoding.encode(status), path: "d", permission: .camera)
        }
        // A node's evaluation without `usable`: still a status's.
        guard case .object(let members) = ModelCoding.encode(status) else { return }
        let withoutUsable = JSONValue.object(members.filter { $0.key != "usable" })
        #expect(throws: ProtocolError.self) {
            try ModelCoding.decodeDevice(withoutUsable, path: "d", permission: .camera)
        }
        // And a device alone is no status: `usable` is required there.
        #expect(throws: ProtocolError.self) {
            try ModelCoding.decodeDeviceStatus(ModelCoding.encode(status.device), path: "d", permission: .camera)
        }
    }

    @Test func indentedIsTheSameValueForPeople() throws {
        let value = ModelCoding.encode(try #require(Self.reports.first))
        let indented = JSONWriter.indented(value)
        #expect(try JSONParser.parse(Array(indented.utf8)) == value)
        #expect(indented.hasPrefix("{\n  \"permission\": \"camera\",\n  \"devices\": [\n    {\n      \"id\": "), "\(indented)")
        #expect(JSONWriter.indented(.object([JSONMember("a", .array([])), JSONMember("b", .object([]))]))
                == "{\n  \"a\": [],\n  \"b\": {}\n}")
    }
}
