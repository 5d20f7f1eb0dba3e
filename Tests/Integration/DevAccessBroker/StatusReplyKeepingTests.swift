import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// devaccessd keeps the encoded reply of a status computed from kept inputs (per uid, protocol
/// version and permissions asked) and serves the next such status from it, with the asker's own
/// request id (StatusInputsCache, "kept replies"). Truth first, and one user's reply never goes
/// to another: real daemon, real users, replies asked on one connection so that all but the
/// first come from what the daemon keeps.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and ACLs"))
struct StatusReplyKeepingTests {
    /// Sends each of argv[2...] (one line each) on one connection, one after the other, and
    /// prints the replies as a JSON list.
    static let conversation = """
        import socket, sys, json
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.settimeout(10)
        replies = []
        buf = b""
        for line in sys.argv[2:]:
            s.sendall(line.encode() + b"\\n")
            while b"\\n" not in buf:
                d = s.recv(65536)
                if not d: break
                buf += d
            if b"\\n" not in buf: break
            reply, buf = buf.split(b"\\n", 1)
            replies.append(json.loads(reply))
        print(json.dumps(replies))
        """

    static func ask(_ user: TestUser, _ setup: RequestSetup, _ lines: [String]) throws -> [[String: Any]] {
        let output = try user.python(Self.conversation, [setup.daemon.socketPath] + lines)
        guard output.status == 0, let data = output.stdout.data(using: .utf8),
              let replies = try JSONSerialization.jsonObject(with: data) as? [[String: Any]], replies.count == lines.count
        else { throw SetupError("replies missing: \(output.stdout) \(output.stderr)") }
        return replies
    }

    static func status(version: Int = 1, id: Int64, permissions: [String]? = nil) -> String {
        var text = #"{"version": \#(version), "id": \#(id), "type": "status""#
        if let permissions { text += #", "permissions": [\#(permissions.map { "\"\($0)\"" }.joined(separator: ", "))]"# }
        return text + "}"
    }

    static func camera(_ reply: [String: Any]) -> [String: Any]? {
        (reply["permissions"] as? [[String: Any]])?.first { $0["permission"] as? String == "camera" }
    }

    static func cameraUsable(_ reply: [String: Any]) -> Bool {
        ((camera(reply)?["devices"] as? [[String: Any]])?.first?["usable"] as? Bool) ?? false
    }

    static func grantAllows(_ reply: [String: Any]) -> Bool {
        ((camera(reply)?["reasons"] as? [[String: Any]]) ?? []).contains {
            ($0["kind"] as? String) == "ledger" && (($0["message"] as? String)?.contains(" allows ") ?? false)
        }
    }

    /// The reply without its id: what must be the same for every asker of one status.
    static func body(_ reply: [String: Any]) throws -> String {
        var reply = reply
        reply["id"] = nil
        let data = try JSONSerialization.data(withJSONObject: reply, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    /// Two users ask for the same status (same version, same permissions), turn about, many
    /// times: each always gets their own, by name, uid and what their ACL entry gives them.
    @Test func twoUsersAskingTheSameStatusEachGetTheirOwn() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let alice = try TestUser("rplyali")
        let bob = try TestUser("rplybob")
        try StatusFreshnessTests.shell("setfacl -m u:\(alice.name):rw '\(setup.camera)'")
        for round in 0..<3 {
            for (user, usable) in [(alice, true), (bob, false)] {
                let lines = (1...4).map { Self.status(id: Int64(round * 10 + $0)) }
                    + (1...3).map { Self.status(id: Int64(round * 10 + 4 + $0), permissions: ["camera"]) }
                for reply in try Self.ask(user, setup, lines) {
                    #expect(reply["type"] as? String == "status", "round \(round), \(user.name): \(reply)")
                    #expect(reply["user"] as? String == user.name && reply["uid"] as? Int == Int(user.uid),
                            "round \(round): \(user.name) (uid \(user.uid)) got someone else's status: \(reply)")
                    #expect(Self.cameraUsable(reply) == usable, "round \(round), \(user.name): \(reply)")
                }
            }
        }
        // The same once more with the kept replies standing for both: now bob gets the entry.
        try StatusFreshnessTests.shell("setfacl -m u:\(bob.name):rw '\(setup.camera)' && setfacl -x u:\(alice.name) "
            + "'\(setup.camera)'")
        for (user, usable) in [(bob, true), (alice, false), (bob, true), (alice, false)] {
            for reply in try Self.ask(user, setup, (1...3).map { Self.status(id: Int64($0)) }) {
                #expect(reply["uid"] as? Int == Int(user.uid) && Self.cameraUsable(reply) == usable,
                        "\(user.name) after the entries moved: \(reply)")
            }
        }
    }

    /// Served from what is kept, a reply carries the id of the request it answers (any id the
    /// protocol allows, in any order) and that request's protocol version; only the id differs.
    @Test func aKeptReplyCarriesTheAskersOwnRequestID() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("rplyids")
        let ids: [Int64] = [1, 2, 987_654_321, 9_007_199_254_740_991, 10, 3, 42, 100_000]
        var asked: [(version: Int, id: Int64, permissions: [String]?)] = []
        for version in [1] {
            for permissions in [nil, ["camera"], ["microphone", "camera"]] as [[String]?] {
                for id in ids { asked.append((version, id, permissions)) }
            }
        }
        let replies = try Self.ask(user, setup, asked.map { Self.status(version: $0.version, id: $0.id,
                                                                         permissions: $0.permissions) })
        var bodies: [String: String] = [:]
        for (request, reply) in zip(asked, replies) {
            #expect((reply["id"] as? NSNumber)?.int64Value == request.id && reply["version"] as? Int == request.version,
                    "asked id \(request.id) version \(request.version): \(reply)")
            #expect(reply["type"] as? String == "status" && reply["uid"] as? Int == Int(user.uid), "\(reply)")
            let order = ((reply["permissions"] as? [[String: Any]]) ?? []).compactMap { $0["permission"] as? String }
            #expect(order == (request.permissions ?? ["camera", "microphone", "location"]), "\(reply)")
            let key = "\(request.version) \(request.permissions ?? [])"
            let body = try Self.body(reply)
            if let first = bodies[key] {
                #expect(first == body, "the same status with another id differs beyond the id: \(first) / \(body)")
            } else {
                bodies[key] = body
            }
        }
    }

    /// A reply kept while a grant stands is not served once the grant has ended: the first
    /// status after its end, on the connection that was served the kept reply, no longer has it.
    @Test func aReplyKeptJustBeforeAGrantEndsIsNotServedAfterIt() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("rplyend")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--for", "3s"] + setup.socket)
            .status == 0)
        let expiry = try LiveEnforcementTests.newestExpiry(setup.stateDirectory)
        // Asked until just before the end (kept, and served from what is kept meanwhile), then
        // once more right after it, on the same connection, with no event in between but the
        // time passing (and the live enforcer's expiry, which may or may not have run yet).
        let script = """
            import socket, sys, json, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            s.settimeout(10)
            end = float(sys.argv[2])
            def ask(i):
                s.sendall(json.dumps({"version": 1, "id": i, "type": "status"}).encode() + b"\\n")
                buf = b""
                while not buf.endswith(b"\\n"):
                    d = s.recv(65536)
                    if not d: raise SystemExit("closed")
                    buf += d
                return json.loads(buf)
            replies = []
            i = 0
            while time.time() < end - 0.3 and i < 200:
                i += 1
                replies.append(ask(i))
                time.sleep(0.01)
            while time.time() <= end + 0.01: time.sleep(0.01)
            replies.append(ask(999))
            print(json.dumps(replies))
            """
        let output = try user.python(script, [setup.daemon.socketPath, String(expiry.timeIntervalSince1970)])
        guard output.status == 0, let data = output.stdout.data(using: .utf8),
              let replies = try JSONSerialization.jsonObject(with: data) as? [[String: Any]], let last = replies.last
        else { throw SetupError("replies missing: \(output.stdout) \(output.stderr)") }
        #expect((last["id"] as? Int) == 999, "\(last)")
        #expect(!Self.grantAllows(last), "the first status after the grant's end still has it: \(last)")
        // The ones before the end had it (those answered in time; a loaded machine may be slow).
        if replies.count > 2 { #expect(replies.dropLast().contains { Self.grantAllows($0) }, "\(replies.prefix(3))") }
    }
}
