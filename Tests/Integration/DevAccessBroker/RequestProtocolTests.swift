import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// The request conversation on the wire (python3 clients as real users): a prompt waiting
/// for a person is connection state, not a handler thread; an answer that breaks the
/// conversation, or a client that leaves, records no decision.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root and runs clients as real test users"))
struct RequestProtocolTests {
    static let common = """
        import socket, sys, json, time
        def connect(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.settimeout(30)
            return s, s.makefile("rb")
        def send(s, obj):
            s.sendall(json.dumps(obj).encode() + b"\\n")
        def read(f):
            line = f.readline()
            return json.loads(line) if line else None
        REQUEST = {"version": 1, "id": 1, "type": "request", "permissions": ["camera"]}

        """

    /// More open prompts than handler threads (4), and the broker still answers others.
    static let manyPrompts = common + """
        path, n = sys.argv[1], int(sys.argv[2])
        conns = [connect(path) for _ in range(n)]
        for s, f in conns:
            send(s, REQUEST)
        prompts = [read(f) for s, f in conns]
        started = time.time()
        hs, hf = connect(path)
        send(hs, {"version": 1, "id": 1, "type": "hello"})
        hello = read(hf)
        hello_ms = (time.time() - started) * 1000
        for (s, f), p in zip(conns, prompts):
            send(s, {"version": 1, "id": 1, "type": "prompt-answer", "prompt": p["prompt"], "answer": "cancel"})
        decisions = [read(f) for s, f in conns]
        print(json.dumps({"prompts": [p["type"] for p in prompts], "hello": hello["type"], "hello_ms": hello_ms,
                          "outcomes": [d["results"][0]["outcome"] for d in decisions],
                          "whys": [d["results"][0]["why"] for d in decisions]}))
        """

    /// A status request where the answer to a prompt belongs.
    static let wrongMessage = common + """
        s, f = connect(sys.argv[1])
        send(s, REQUEST)
        prompt = read(f)
        send(s, {"version": 1, "id": 2, "type": "status"})
        reply = read(f)
        rest = f.readline()
        print(json.dumps({"prompt": prompt["type"], "reply": reply, "closed": rest == b""}))
        """

    /// An answer naming a prompt that is not open, then a closed connection mid-prompt.
    static let mismatchThenLeave = common + """
        s, f = connect(sys.argv[1])
        send(s, REQUEST)
        prompt = read(f)
        send(s, {"version": 1, "id": 1, "type": "prompt-answer", "prompt": prompt["prompt"] + 5, "answer": "always"})
        mismatch = read(f)
        send(s, dict(REQUEST, id=3))
        again = read(f)
        s.close()
        print(json.dumps({"mismatch": mismatch, "again": again["type"]}))
        """

    @Test func promptsWaitingForPeopleHoldNoHandlerThread() throws {
        // 12 prompts of one user, 3 times the handler threads: above the default per-user limit of 4.
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", daemonArguments: ["--max-prompts-per-user", "12"])
        let user = try TestUser("many")
        let result = try user.python(Self.manyPrompts, [setup.daemon.socketPath, "12"])
        #expect(result.status == 0, "\(result.stderr)")
        let document = try json(result.stdout)
        #expect(document["prompts"] as? [String] == Array(repeating: "prompt", count: 12))
        #expect(document["hello"] as? String == "hello")
        #expect((document["hello_ms"] as? Double ?? 1e9) < 2000, "answered while 12 prompts wait: \(document)")
        #expect(document["outcomes"] as? [String] == Array(repeating: "undecided", count: 12))
        #expect(document["whys"] as? [String] == Array(repeating: "dismissed", count: 12))
        #expect(try setup.grants(user).isEmpty)
    }

    @Test func aMessageOtherThanTheAnswerEndsThePromptWithNothingRecorded() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("rude")
        let result = try user.python(Self.wrongMessage, [setup.daemon.socketPath])
        #expect(result.status == 0, "\(result.stderr)")
        let document = try json(result.stdout)
        #expect(document["prompt"] as? String == "prompt")
        let reply = try #require(document["reply"] as? [String: Any])
        #expect(reply["code"] as? String == "bad-message", "\(reply)")
        #expect((reply["reason"] as? String ?? "").contains("waits for the answer to its prompt"))
        #expect(document["closed"] as? Bool == true)
        try expectEventually { try setup.requestEvents(user).contains { $0.details["outcome"] == "client-bad-message" } }
        #expect(try setup.grants(user).isEmpty)
    }

    @Test func aMismatchedAnswerIsRefusedAndALeavingClientDecidesNothing() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("leave")
        let result = try user.python(Self.mismatchThenLeave, [setup.daemon.socketPath])
        #expect(result.status == 0, "\(result.stderr)")
        let document = try json(result.stdout)
        let mismatch = try #require(document["mismatch"] as? [String: Any])
        #expect(mismatch["code"] as? String == "bad-message" && mismatch["context"] as? String == "$.prompt", "\(mismatch)")
        #expect(document["again"] as? String == "prompt", "the connection stays usable")
        try expectEventually { try setup.requestEvents(user).contains { $0.details["outcome"] == "client-closed" } }
        #expect(try setup.grants(user).isEmpty)
    }

    /// A request in another version than 1 is refused before it is read, naming version 1;
    /// nothing is granted or recorded.
    @Test func aRequestInAnotherVersionIsRefused() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("old")
        let result = try json(user.python(PythonClient.oneMessage, [setup.daemon.socketPath,
            #"{"version":2,"id":9,"type":"request","permissions":["camera"],"scope":"always"}"#]).stdout)
        let reply = try #require(result["reply"] as? [String: Any])
        #expect(reply["code"] as? String == "unsupported-version" && reply["version"] as? Int == 1, "\(reply)")
        #expect((reply["reason"] as? String)?.contains("this broker speaks version 1") == true, "\(reply)")
        #expect(try setup.grants(user).isEmpty)
    }

    func expectEventually(seconds: Double = 10, _ condition: () throws -> Bool,
                          sourceLocation: SourceLocation = #_sourceLocation) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return }
            usleep(50_000)
        }
        Issue.record("not within \(seconds) s", sourceLocation: sourceLocation)
    }
}
