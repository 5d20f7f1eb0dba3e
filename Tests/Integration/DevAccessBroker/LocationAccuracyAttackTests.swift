import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// Location is granted at a level (exact ... country). What a user would try to get more
/// than decided: ask for exact past the policy's cap, or send the broker a request message
/// of their own making for a finer level than their grant, or words that are not levels.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct LocationAccuracyAttackTests {
    /// Sends each line (raw bytes, as a client could write them) on a fresh connection and
    /// collects the replies until the final one; a prompt is cancelled, a `queued` read past.
    static let crafted = """
        import socket, sys, json
        path, lines = sys.argv[1], json.loads(sys.argv[2])
        out = []
        for line in lines:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.settimeout(30)
            f = s.makefile("rb")
            s.sendall(line.encode() + b"\\n")
            replies = []
            while True:
                raw = f.readline()
                if not raw:
                    break
                reply = json.loads(raw)
                replies.append(reply)
                if reply["type"] == "prompt":
                    s.sendall(json.dumps({"version": reply["version"], "id": reply["id"], "type": "prompt-answer",
                                          "prompt": reply["prompt"], "answer": "cancel"}).encode() + b"\\n")
                    continue
                if reply["type"] != "queued":
                    break
            s.close()
            out.append(replies)
        print(json.dumps(out))
        """

    static func request(_ accuracy: String, permissions: String = "[\"location\"]") -> String {
        "{\"version\":1,\"id\":7,\"type\":\"request\",\"permissions\":\(permissions),\"scope\":\"always\","
            + "\"accuracy\":\(accuracy)}"
    }

    func send(_ lines: [String], as user: TestUser, to setup: RequestSetup) throws -> [[[String: Any]]] {
        let encoded = String(decoding: try JSONSerialization.data(withJSONObject: lines), as: UTF8.self)
        let result = try user.python(Self.crafted, [setup.daemon.socketPath, encoded])
        try #require(result.status == 0, "\(result.stderr)")
        let parsed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
        return try #require(parsed as? [[[String: Any]]])
    }

    /// The policy caps alice's location at city: asking for exact is answered at city (not
    /// refused), the grant records city, the message says why, and the status is `limited`.
    /// Someone the rule does not match gets what they asked for.
    @Test func exactPastThePolicysCapIsGrantedAtTheCap() throws {
        let alice = try TestUser("lcap")
        let bob = try TestUser("lfree")
        let setup = try RequestSetup(policy: """
            [location]
            Default=allow

            [Rule]
            Permission=location
            User=\(alice.name)
            MaxAccuracy=city
            Action=allow
            """, location: true)
        let asked = try alice.withoutTerminal(["request", "location", "--accuracy", "exact", "--always", "--json"]
                                              + setup.socket)
        #expect(asked.status == 2, "limited: \(asked.stderr)")
        let document = try json(asked.stdout)
        let result = try #require((document["results"] as? [[String: Any]])?.first)
        #expect(result["outcome"] as? String == "granted" && result["accuracy"] as? String == "city", "\(result)")
        let message = result["message"] as? String ?? ""
        #expect(message.contains("exact was asked") && message.contains("MaxAccuracy=city"), "\(message)")
        let status = try #require((document["permissions"] as? [[String: Any]])?.first)
        #expect(status["status"] as? String == "limited" && status["accuracy"] as? String == "city", "\(status)")
        let reasons = (status["reasons"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
        #expect(reasons.first?.contains("granted at city accuracy, about 10 km") == true, "\(reasons)")
        let grants = try setup.grants(alice)
        #expect(grants.count == 1 && grants.first?.accuracy == .city && grants.first?.method == .policy)
        // The level is in the audit trail: the grant's event and the request's.
        let decision = try setup.ledger().events().map(\.event).last { $0.type == .decision && $0.subject?.uid == alice.uid }
        #expect(decision?.details["accuracy"] == "city")
        let received = try setup.requestEvents(alice).first { $0.details["stage"] == "received" }
        #expect(received?.details["accuracy"] == "exact" && received?.details["accuracy_granted"] == "city")

        let free = try bob.withoutTerminal(["request", "location", "--accuracy", "exact", "--always", "--json"]
                                           + setup.socket)
        #expect(free.status == 0, "\(free.stderr)")
        #expect(try setup.grants(bob).first?.accuracy == .exact)
    }

    /// Alice holds a city grant. Request messages of her own making cannot turn it into
    /// more: exact is a new request (here for an administrator), never an answer from the
    /// city grant; spellings that are not levels, a repeated member, a level on camera or on
    /// the microphone, and a `decide` for herself are refused; city or coarser is
    /// answered by the grant she has.
    @Test func aCityGrantCannotBecomeExactThroughACraftedRequest() throws {
        let carol = try TestUser("ladm")
        let alice = try TestUser("lcity")
        let setup = try RequestSetup(policy: "[location]\nDefault=auth_admin\n", admins: [carol], location: true)
        let granted = try carol.devaccess(["grant", "location", "--user", alice.name, "--accuracy", "city"]
                                          + setup.socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        #expect(granted.stdout.contains("allow location (city) for \(alice.name)"), "\(granted.stdout)")

        let replies = try send([
            Self.request("\"exact\""),
            Self.request("\"EXACT\""),
            Self.request("\"precise\""),
            Self.request("null"),
            Self.request("0"),
            Self.request("\"exact\"", permissions: "[\"camera\"]"),
            Self.request("\"exact\"", permissions: "[\"microphone\"]"),
            "{\"version\":1,\"id\":7,\"type\":\"request\",\"permissions\":[\"location\"],\"accuracy\":\"city\","
                + "\"accuracy\":\"exact\"}",
            "{\"version\":1,\"id\":7,\"type\":\"decide\",\"decision\":\"allow\",\"permission\":\"location\","
                + "\"user\":\"\(alice.name)\",\"accuracy\":\"exact\"}",
            Self.request("\"city\""),
            Self.request("\"country\""),
        ], as: alice, to: setup)
        try #require(replies.count == 11)
        func final(_ index: Int) -> [String: Any] { replies[index].last ?? [:] }
        func result(_ index: Int) -> [String: Any] { (final(index)["results"] as? [[String: Any]])?.first ?? [:] }

        // Exact: not answered by the city grant; queued for an administrator.
        #expect(replies[0].first?["type"] as? String == "queued", "\(replies[0])")
        #expect(result(0)["outcome"] as? String == "pending", "\(replies[0])")
        // Not levels, or not where a level goes: refused by the decoder, naming the field.
        for index in 1...5 {
            #expect(final(index)["type"] as? String == "error", "\(index): \(replies[index])")
            #expect(final(index)["context"] as? String == "$.accuracy", "\(index): \(replies[index])")
        }
        #expect((final(2)["reason"] as? String)?.contains("'precise' is not one of: exact, street") == true)
        #expect(final(6)["type"] as? String == "error", "no level on the microphone: \(replies[6])")
        #expect(final(7)["type"] as? String == "error", "a repeated member: \(replies[7])")
        #expect(final(8)["type"] as? String == "error", "decide for herself: \(replies[8])")
        // City, and coarser: the grant she has answers, at its own level.
        for index in [9, 10] {
            #expect(result(index)["outcome"] as? String == "already-allowed", "\(index): \(replies[index])")
            #expect(result(index)["accuracy"] as? String == "city", "\(index): \(replies[index])")
        }
        let status = (final(9)["permissions"] as? [[String: Any]])?.first ?? [:]
        #expect(status["status"] as? String == "limited" && status["accuracy"] as? String == "city", "\(status)")

        // Nothing of it gave her more than city.
        let allows = try setup.grants(alice).filter { $0.decision == .allow && $0.isActive(at: Date()) }
        #expect(allows.map(\.accuracy) == [.city], "\(allows)")
        #expect(try setup.ledger().pendingRequests(uid: alice.uid).map(\.accuracy) == [.exact])
        // The refused decide is audited as a refusal.
        let refusals = try setup.ledger().events().map(\.event).filter { $0.type == .refused && $0.actor?.uid == alice.uid }
        #expect(refusals.contains { refusal in
            refusal.details["operation"] == "grant" && refusal.details["reason"]?.contains("may not grant location") == true
        }, "\(refusals)")

        // An administrator's approval grants the level she asked for.
        let approved = try carol.devaccess(["approve", "1", "--json"] + setup.socket)
        #expect(approved.status == 0, "\(approved.stderr)")
        let now = try setup.grants(alice).filter { $0.decision == .allow && $0.isActive(at: Date()) }
        #expect(now.map(\.accuracy) == [.exact] && now.first?.method == .admin, "\(now)")
    }

    /// The prompt names the level a grant would give, the capped one when the policy caps it.
    @Test func thePromptSaysTheLevel() throws {
        let alice = try TestUser("lask")
        let setup = try RequestSetup(policy: "[location]\nDefault=auth_self\nMaxAccuracy=neighborhood\n", location: true)
        let replies = try send([Self.request("\"city\""), Self.request("\"exact\"")], as: alice, to: setup)
        let texts = replies.map { replies in replies.first { $0["type"] as? String == "prompt" }?["text"] as? String ?? "" }
        #expect(texts[0].contains("to know this computer's location to about 10 km (city) always?"), "\(texts[0])")
        #expect(texts[1].contains("to know this computer's location to about 1 km (neighborhood) always?"), "\(texts[1])")
        #expect(texts[1].contains("exact was asked; the policy's MaxAccuracy=neighborhood"), "\(texts[1])")
        #expect(try setup.grants(alice).isEmpty, "cancelled prompts record nothing")
    }

    /// `grant --accuracy` only for location; `deny` has no level at all.
    @Test func theAdminCommandsRefuseALevelWhereItMeansNothing() throws {
        let carol = try TestUser("ladm2")
        let alice = try TestUser("lcam")
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", admins: [carol], location: true)
        let camera = try carol.devaccess(["grant", "camera", "--user", alice.name, "--accuracy", "city"] + setup.socket)
        #expect(camera.status == 64 && camera.stderr.contains("'--accuracy' goes with location only"), "\(camera.stderr)")
        let word = try carol.devaccess(["grant", "location", "--user", alice.name, "--accuracy", "precise"] + setup.socket)
        #expect(word.status == 64 && word.stderr.contains("'precise' is not a location accuracy"), "\(word.stderr)")
        let deny = try carol.devaccess(["deny", "location", "--user", alice.name, "--accuracy", "city"] + setup.socket)
        #expect(deny.status == 64, "\(deny.stderr)")
        let request = try alice.withoutTerminal(["request", "camera", "--accuracy", "city"] + setup.socket)
        #expect(request.status == 64 && request.stderr.contains("'--accuracy' goes with location"), "\(request.stderr)")
        #expect(try setup.grants(alice).isEmpty)
        let listed = try carol.devaccess(["grant", "location", "--user", alice.name, "--accuracy", "street"] + setup.socket)
        #expect(listed.status == 0, "\(listed.stderr)")
        let list = try carol.devaccess(["list", "--user", alice.name, "--json"] + setup.socket)
        let grant = try #require((try json(list.stdout)["grants"] as? [[String: Any]])?.first)
        #expect(grant["accuracy"] as? String == "street", "\(list.stdout)")
        let text = try carol.devaccess(["list", "--user", alice.name] + setup.socket)
        #expect(text.stdout.contains("location (street)"), "\(text.stdout)")
    }
}
