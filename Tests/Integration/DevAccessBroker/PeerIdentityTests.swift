import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessEngine

/// Identity comes from the kernel (SO_PEERCRED, SO_PEERGROUPS, /proc/PID/exe), never
/// from the message; what a peer may do follows from it.
extension DaemonTests {
    /// A camera node (/dev/null's numbers) that only `owner` can open, through an ACL
    /// entry, and a daemon that reads its devices from a declaration of that node.
    struct CameraSetup {
        let nodes: TemporaryDirectory
        let daemon: RunningDaemon
        let node: String

        init(aclFor owner: TestUser, arguments: [String] = []) throws {
            nodes = try TemporaryDirectory()
            node = try nodes.makeNullNode("video0", mode: "0600")
            try TestProcess.setup("setfacl", ["-m", "u:\(owner.uid):rw", node])
            let devices = try declareDevices([[
                "permission": "camera", "id": "camera:test-video-index0", "name": "Test Camera",
                "nodes": [["path": node, "major": 1, "minor": 3]],
            ]], in: nodes)
            daemon = try RunningDaemon(arguments: arguments, environment: ["DEVACCESS_TEST_DEVICES": devices])
        }
    }

    static func realPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    @Test func helloReportsThePeerAsTheKernelSeesIt() throws {
        let daemon = try RunningDaemon()
        let alice = try TestUser("hello")
        let result = try alice.python(PythonClient.oneMessage, [daemon.socketPath, #"{"version":1,"id":1,"type":"hello"}"#])
        #expect(result.status == 0, "\(result.stderr)")
        let output = try json(result.stdout)
        let reply = try #require(output["reply"] as? [String: Any])
        let peer = try #require(reply["peer"] as? [String: Any])
        #expect(peer["uid"] as? Int == Int(alice.uid))
        #expect(peer["gid"] as? Int == Int(alice.gid))
        #expect(peer["user"] as? String == alice.name)
        #expect(peer["admin"] as? Bool == false)
        #expect(peer["program"] as? String == Self.realPath("/usr/bin/python3"), "read from /proc/PID/exe")
        #expect((peer["pid"] as? Int ?? 0) > 1)
        #expect(output["closed"] as? Bool == false, "a hello keeps the connection open")
    }

    @Test func aClaimedUIDIsRefusedAndAClaimedUserNeedsAdmin() throws {
        let daemon = try RunningDaemon()
        let mallory = try TestUser("mallory")
        // An identity field in the message is an unknown field: refused, connection closed.
        let claimed = try json(mallory.python(PythonClient.oneMessage, [daemon.socketPath,
            #"{"version":1,"id":3,"type":"status","uid":0}"#]).stdout)
        let claimedReply = try #require(claimed["reply"] as? [String: Any])
        #expect(claimedReply["code"] as? String == "bad-message")
        #expect(claimedReply["context"] as? String == "$.uid")
        #expect(claimed["closed"] as? Bool == true)
        // Asking for root's status by name: refused (the connection stays open).
        let asRoot = try json(mallory.python(PythonClient.oneMessage, [daemon.socketPath,
            #"{"version":1,"id":4,"type":"status","user":"root"}"#]).stdout)
        let refusal = try #require(asRoot["reply"] as? [String: Any])
        #expect(refusal["code"] as? String == "permission-denied")
        #expect(refusal["id"] as? Int == 4)
        #expect((refusal["reason"] as? String ?? "").contains("only root and members of group 'devaccess-admin'"))
        #expect(asRoot["closed"] as? Bool == false)
        // Without a user, the status is the peer's own.
        let own = try json(mallory.python(PythonClient.oneMessage, [daemon.socketPath,
            #"{"version":1,"id":5,"type":"status"}"#]).stdout)
        let ownReply = try #require(own["reply"] as? [String: Any])
        #expect(ownReply["uid"] as? Int == Int(mallory.uid))
        #expect(ownReply["user"] as? String == mallory.name)
    }

    @Test func statusIsComputedForThePeerFromRealNodes() throws {
        let alice = try TestUser("alice")
        let bob = try TestUser("bob")
        let setup = try CameraSetup(aclFor: alice)
        let socket = ["--socket", setup.daemon.socketPath]

        let aliceStatus = try alice.devaccess(["status", "camera", "--broker", "--json"] + socket)
        #expect(aliceStatus.status == 0, "\(aliceStatus.stderr)")
        let aliceDocument = try json(aliceStatus.stdout)
        #expect(aliceDocument["uid"] as? Int == Int(alice.uid))
        let aliceCamera = try #require((aliceDocument["permissions"] as? [[String: Any]])?.first)
        #expect(aliceCamera["status"] as? String == "authorized")
        // The kernel agrees.
        #expect(try alice.canOpen(setup.node, .readWrite))

        let bobStatus = try bob.devaccess(["status", "camera", "--broker", "--json"] + socket)
        let bobCamera = try #require((try json(bobStatus.stdout)["permissions"] as? [[String: Any]])?.first)
        #expect(bobCamera["status"] as? String == "notDetermined")
        #expect(try !bob.canOpen(setup.node, .read))

        // The table from the broker is the table a local probe prints (root's: the ledger is
        // private, and only root reads it without the broker).
        let viaBroker = try bob.devaccess(["status", "camera", "--broker"] + socket)
        let local = try TestProcess.devaccess(["status", "camera", "--user", bob.name,
                                               "--state-dir", setup.daemon.stateDirectory],
                                              environment: ["DEVACCESS_TEST_DEVICES": setup.nodes.path + "/devices.json"])
        // The local table also says who opens the nodes without devaccess (probed here, so not
        // part of what devaccessd answers); the statuses before it are the same.
        #expect(local.stdout.contains("\nwithout devaccess: "), "\(local.stdout)")
        #expect(viaBroker.stdout == Self.statusPart(local.stdout), "broker:\n\(viaBroker.stdout)\nlocal:\n\(local.stdout)")
    }

    /// A local `status` table without its "without devaccess" section (the gate).
    static func statusPart(_ table: String) -> String {
        guard let range = table.range(of: "\nwithout devaccess: ") else { return table }
        return String(table[...range.lowerBound])  // up to the status's last newline
    }

    @Test func policyIsReadForEveryStatus() throws {
        let alice = try TestUser("policy")
        let config = try TemporaryDirectory()
        let file = config.path + "/devaccess.conf"
        try Data("[camera]\nDefault=ask\n[Rule]\nUser=\(alice.name)\nAction=deny\n".utf8).write(to: URL(fileURLWithPath: file))
        let setup = try CameraSetup(aclFor: alice, arguments: ["--config-dir", config.path])
        let arguments = ["status", "camera", "--broker", "--json", "--socket", setup.daemon.socketPath]

        let denied = try json(alice.devaccess(arguments).stdout)
        let camera = try #require((denied["permissions"] as? [[String: Any]])?.first)
        #expect(camera["status"] as? String == "restricted", "the ACL opens the node, the policy forbids it")
        let reasons = (camera["reasons"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
        #expect(reasons.contains("policy forbids camera for \(alice.name) (\(file):3)"), "\(reasons)")
        // The same answer as the local computation with the same policy.
        let local = try TestProcess.devaccess(["status", "camera", "--user", alice.name,
                                               "--state-dir", setup.daemon.stateDirectory],
                                              environment: ["DEVACCESS_TEST_DEVICES": setup.nodes.path + "/devices.json",
                                                            "DEVACCESS_CONFIG_DIR": config.path])
        let viaBroker = try alice.devaccess(["status", "camera", "--broker", "--socket", setup.daemon.socketPath])
        #expect(local.stdout.contains("\nwithout devaccess: "), "\(local.stdout)")
        #expect(viaBroker.stdout == Self.statusPart(local.stdout), "broker:\n\(viaBroker.stdout)\nlocal:\n\(local.stdout)")

        // An edited policy counts from the next request; no restart, no reload.
        try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: file))
        let allowed = try json(alice.devaccess(arguments).stdout)
        #expect((allowed["permissions"] as? [[String: Any]])?.first?["status"] as? String == "authorized")
    }

    @Test func anotherUsersStatusIsRefusedAndAudited() throws {
        let alice = try TestUser("victim")
        let bob = try TestUser("snoop")
        let setup = try CameraSetup(aclFor: alice)
        let refused = try bob.devaccess(["status", "--broker", "--socket", setup.daemon.socketPath, "--user", alice.name])
        #expect(refused.status == 77, "\(refused.stderr)")
        #expect(refused.stderr.contains("devaccessd refused (permission-denied)"))
        #expect(refused.stdout.isEmpty)

        let ledger = try Ledger(path: setup.daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        let events = try ledger.events().filter { $0.event.type == .refused }
        #expect(events.count == 1)
        let event = try #require(events.first?.event)
        #expect(event.actor == Principal(uid: bob.uid, name: bob.name))
        #expect(event.subject == Principal(uid: alice.uid, name: alice.name))
        #expect(event.program == Self.realPath(TestProcess.devaccessBinary), "the program the kernel ran")
        #expect(event.details["operation"] == "status for another user")
        #expect(event.details["pid"].flatMap { Int32($0) }.map { $0 > 1 } == true)
        #expect(try ledger.verify().isIntact)
    }

    @Test func membersOfDevaccessAdminMayAskForOthers() throws {
        let admin = try AdminGroup()
        let carol = try TestUser("carol")
        let dave = try TestUser("dave")
        try admin.add(carol)
        let daemon = try RunningDaemon()
        let socket = ["--socket", daemon.socketPath]

        let forDave = try carol.devaccess(["status", "--broker", "--json", "--user", dave.name] + socket)
        #expect(forDave.status == 0, "\(forDave.stderr)")
        #expect(try json(forDave.stdout)["uid"] as? Int == Int(dave.uid))
        let hello = try json(carol.python(PythonClient.oneMessage, [daemon.socketPath,
            #"{"version":1,"id":1,"type":"hello"}"#]).stdout)
        #expect((hello["reply"] as? [String: Any]).flatMap { $0["peer"] as? [String: Any] }?["admin"] as? Bool == true)
        // Dave is no admin.
        #expect(try dave.devaccess(["status", "--broker", "--user", carol.name] + socket).status == 77)
        // Root always is; a uid works as well as a name.
        let byRoot = try TestProcess.devaccess(["status", "--broker", "--json", "--user", String(dave.uid)] + socket)
        #expect(try json(byRoot.stdout)["user"] as? String == dave.name)
        // An unknown user is a usage error, as for the local status.
        #expect(try carol.devaccess(["status", "--broker", "--user", "no-such-user-xyz"] + socket).status == 64)
    }

    @Test func twoHundredConcurrentClientsAreAllAnsweredForTheirOwnUID() throws {
        let daemon = try RunningDaemon()
        let users = [try TestUser("many1"), try TestUser("many2")]
        let results = Results()
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let output = Result { try users[index].python(PythonClient.manyClients, [daemon.socketPath, "100"]) }
            results.set(index, output)
        }
        for index in 0..<2 {
            let output = try results.get(index)
            #expect(output.status == 0, "\(output.stderr)")
            let document = try json(output.stdout)
            #expect(document["good"] as? Int == 100, "\(document["bad"] ?? "")")
        }
        #expect(daemon.process.isRunning)
        #expect(daemon.stop() == 0)
    }

    /// One protocol version (issue 26): a `request` is served in version 1 (it was refused as
    /// not implemented there when versions 1-8 existed). Without a device nothing is granted,
    /// and the connection stays open for the next message.
    @Test func aRequestWithoutADeviceGrantsNothing() throws {
        let nodes = try TemporaryDirectory()
        let daemon = try RunningDaemon(environment: ["DEVACCESS_TEST_DEVICES": try declareDevices([], in: nodes)])
        let erin = try TestUser("erin")
        let result = try json(erin.python(PythonClient.oneMessage, [daemon.socketPath,
            #"{"version":1,"id":9,"type":"request","permissions":["camera"],"reason":"call","scope":"for","duration":3600}"#]).stdout)
        let reply = try #require(result["reply"] as? [String: Any])
        let results = reply["results"] as? [[String: Any]] ?? []
        #expect(reply["type"] as? String == "decision" && results.map { $0["outcome"] as? String } == ["unavailable"],
                "\(reply)")
        #expect(result["closed"] as? Bool == false)
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        #expect(try ledger.grants(includeInactive: true).isEmpty)
    }
}

/// `devaccess-admin`, created for the test when the machine has none (and then removed).
final class AdminGroup {
    let name = "devaccess-admin"
    private let created: Bool
    private var members: [String] = []

    init() throws {
        if try TestProcess.run("/usr/bin/getent", ["group", name]).status == 0 {
            created = false
        } else {
            try TestProcess.setup("groupadd", ["-r", name])
            created = true
        }
    }

    func add(_ user: TestUser) throws {
        try TestProcess.setup("usermod", ["-a", "-G", name, user.name])
        members.append(user.name)
    }

    deinit {
        for member in members { TestProcess.cleanup("gpasswd", ["-d", member, name]) }
        if created { TestProcess.cleanup("groupdel", [name]) }
    }
}

final class Results: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Int: Result<ProcessOutput, any Error>] = [:]

    func set(_ index: Int, _ value: Result<ProcessOutput, any Error>) {
        lock.withLock { values[index] = value }
    }

    func get(_ index: Int) throws -> ProcessOutput {
        guard let value = lock.withLock({ values[index] }) else { throw SetupError("no result \(index)") }
        return try value.get()
    }
}
