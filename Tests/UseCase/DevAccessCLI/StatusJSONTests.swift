import DevAccessArguments
import DevAccessCore
import DevAccessProtocol
import DevAccessTestSupport
import Foundation
import Testing
@testable import DevAccessCLI
import DevAccessInterface

/// One encoding of a status: what `status --json` and `devices --json` print is the wire's
/// encoding (ModelCoding), read back by the client library's strict decoder into the very
/// values the command computed, kernel facts, ACL and evaluation included.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users and device nodes"))
struct StatusJSONTests {
    /// The printed document's top-level object, parsed by the protocol's strict parser.
    private func members(_ output: ProcessOutput) throws -> JSONValue {
        #expect(output.status == 0, "\(output.stderr)")
        return try JSONParser.parse(Array(output.stdout.utf8))
    }

    @Test func statusJSONDecodesWithTheWiresDecoderIntoTheStatusItPrinted() async throws {
        let fx = try AdminFixture("sjson")
        let bob = try TestUser("sjsonb")
        let node = try fx.camera("cam0", group: "root", mode: "0640")
        try TestProcess.setup("setfacl", ["-m", "u:\(fx.alice.name):rw,u:\(bob.name):r", node])
        let argv = ["camera", "--user", fx.alice.name]
        let printed = try members(try fx.run(["status"] + argv + ["--json"]))

        // The whole document: the wire's `status` reply members, then the local gate; nothing else.
        let (user, uid, statuses) = try Strict.object(printed, path: "status") { (reader) throws(ProtocolError) in
            let decoded = try ModelCoding.decodeStatusMembers(&reader)
            _ = reader.optional("gate")
            return decoded
        }
        #expect(user == fx.alice.name && uid == fx.alice.uid)

        // The same status, computed here the way the command computes it.
        let arguments = try ArgumentParser.parse(argv, for: StatusCommand.spec,
                                                 environment: ProcessEnvironment(fx.environment))
        let computed = try await LocalStatus.compute([.camera], try CommonOptions.reads(arguments, command: "status"),
                                                     arguments, command: "status").permissions
        #expect(statuses == computed)

        // Not an empty equality: the node's facts, its ACL with names, and alice's evaluation came through.
        let status = try #require(statuses.first)
        #expect(status.status == .authorized)
        let nodeStatus = try #require(status.devices.first?.nodes.first)
        let facts = try #require(nodeStatus.node.facts)
        #expect(facts.path == node && facts.kind == .characterDevice && facts.major == 1 && facts.minor == 3)
        #expect(facts.ownerUID == 0 && facts.ownerName == "root" && facts.mode & 0o007 == 0,
                "owner \(facts.ownerUID), mode \(String(facts.mode, radix: 8))")
        let acl = try #require(facts.acl)
        #expect(acl.contains(ACLEntry(tag: .user(fx.alice.uid), permissions: .readWrite, qualifierName: fx.alice.name)),
                "\(acl)")
        #expect(acl.contains(ACLEntry(tag: .user(bob.uid), permissions: .read, qualifierName: bob.name)), "\(acl)")
        #expect(nodeStatus.evaluation?.access == .readWrite)
        #expect(nodeStatus.evaluation?.decidedBy == .namedUser(uid: fx.alice.uid))

        // And the wire's encoding of that value is, member for member, what was printed.
        guard case .object(let top) = printed, let permissions = top.first(where: { $0.key == "permissions" })?.value else {
            Issue.record("no permissions in \(printed)")
            return
        }
        #expect(permissions == .array(computed.map(ModelCoding.encode)))
    }

    @Test func devicesJSONIsTheDeviceEncodingWithoutStatus() async throws {
        let fx = try AdminFixture("djson")
        let node = try fx.camera("cam0", mode: "0600")
        let printed = try members(try fx.run(["devices", "camera", "--json"]))
        let reports = try Strict.object(printed, path: "devices") { (reader) throws(ProtocolError) in
            try reader.array("permissions", maxCount: 16, ModelCoding.decodeAdapterReport)
        }
        let arguments = try ArgumentParser.parse(["camera"], for: DevicesCommand.spec,
                                                 environment: ProcessEnvironment(fx.environment))
        let computed = try await CommonOptions.reads(arguments, command: "devices").devices([.camera])
        #expect(reports == computed)
        let device = try #require(reports.first?.devices.first)
        #expect(device.nodes.map(\.path) == [node] && device.nodes.first?.facts?.mode == 0o600)
        // No `usable` and no `evaluation`: what the hardware shows, for nobody in particular.
        #expect(!printedText(printed).contains("\"usable\"") && !printedText(printed).contains("\"evaluation\""))
    }

    private func printedText(_ value: JSONValue) -> String { JSONWriter.string(value) }
}
