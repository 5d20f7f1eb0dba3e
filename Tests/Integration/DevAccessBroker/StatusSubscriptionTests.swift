import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// `subscribe` (protocol 7) and `DeviceAccess.statusUpdates`: changes pushed by devaccessd
/// from where it learns of them (the live enforcer's runs), bounded per user.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct StatusSubscriptionTests {
    /// Opens argv[2] connections and subscribes on each (protocol 7), reads each first
    /// reply, reports how many were updates and how many refusals, then holds them all.
    static let subscriptionFlood = """
        import socket, sys, json, time
        path, n = sys.argv[1], int(sys.argv[2])
        socks, updates, busy, other = [], 0, 0, []
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                s.sendall(b'{"version":1,"id":1,"type":"subscribe","permissions":["camera"]}\\n')
            except OSError as e:
                busy += 1
                continue
            socks.append(s)
        for s in socks:
            s.settimeout(20)
            buf = b""
            try:
                while not buf.endswith(b"\\n"):
                    d = s.recv(65536)
                    if not d: break
                    buf += d
                r = json.loads(buf)
                if r["type"] == "update": updates += 1
                elif r["type"] == "error" and r["code"] == "busy": busy += 1
                else: other.append(r)
            except Exception as e:
                other.append(repr(e))
        print(json.dumps({"updates": updates, "busy": busy, "other": other[:3]}), flush=True)
        time.sleep(60)
        """

    /// The attack: a user opens a thousand subscriptions. devaccessd keeps a few (each
    /// costs an evaluation per change), refuses the rest `busy`, and still serves
    /// everyone else, whose updates still arrive.
    @Test func aThousandSubscriptionsOfOneUserAreRefusedBeyondTheLimit() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let mallory = try TestUser("subflood")
        let erin = try TestUser("subvictim")
        let flood = try mallory.background(Self.subscriptionFlood, [setup.daemon.socketPath, "1000"], reportWithin: 60)
        #expect(flood.report["updates"] as? Int == 8, "\(flood.report)")
        #expect(flood.report["busy"] as? Int == 992, "\(flood.report)")
        #expect((flood.report["other"] as? [Any])?.isEmpty == true, "\(flood.report)")

        // Everyone else is served, subscriptions included, while the flood holds its connections.
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["watch", "camera"])
        let first = try watch.waitForLines(1)
        #expect(first.first?["status"] as? String == "notDetermined", "\(first)")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name] + setup.socket).status == 0)
        let granted = try watch.waitForLines(2)
        #expect(granted.last?["status"] as? String == "authorized", "\(granted)")
    }

    /// A grant and a revoke reach a subscriber within a second (a correctness bound: they
    /// are pushed when devaccessd applies them, nobody polls), and only its own user's.
    @Test func aGrantAndARevokeArePushedWithinASecond() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("subwatch")
        let other = try TestUser("subother")
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["watch", "camera", "microphone"])
        let initial = try watch.waitForLines(2)
        #expect(Set(initial.compactMap { $0["permission"] as? String }) == ["camera", "microphone"], "\(initial)")
        #expect(initial.allSatisfy { $0["status"] as? String == "notDetermined" }, "\(initial)")

        // Another user's grant changes nothing of erin's: no update.
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", other.name] + setup.socket).status == 0)
        let sentAt = Date().timeIntervalSince1970
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name] + setup.socket).status == 0)
        let granted = try watch.waitForLines(3)
        #expect(granted.count == 3, "an update that was not erin's: \(granted)")
        #expect(granted[2]["permission"] as? String == "camera" && granted[2]["status"] as? String == "authorized",
                "\(granted)")
        let grantDelay = (granted[2]["time"] as? Double ?? .infinity) - sentAt
        #expect(grantDelay < 1, "the grant arrived after \(grantDelay) s")

        let revokedAt = Date().timeIntervalSince1970
        #expect(try TestProcess.devaccess(["revoke", "camera", "--user", erin.name] + setup.socket).status == 0)
        let revoked = try watch.waitForLines(4)
        #expect(revoked[3]["permission"] as? String == "camera" && revoked[3]["status"] as? String == "notDetermined",
                "\(revoked)")
        let revokeDelay = (revoked[3]["time"] as? Double ?? .infinity) - revokedAt
        #expect(revokeDelay < 1, "the revoke arrived after \(revokeDelay) s")
        print("statusUpdates delays: grant \(grantDelay) s (including the CLI's run), revoke \(revokeDelay) s")
    }

    /// Subscribes, reads the first update, reports, then never reads again.
    static let deafSubscriber = """
        import socket, sys, json, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(sys.argv[1])
        s.sendall(b'{"version":1,"id":1,"type":"subscribe"}\\n')
        buf = b""
        while not buf.endswith(b"\\n"):
            buf += s.recv(1)
        print(json.dumps({"first": json.loads(buf)["type"]}), flush=True)
        time.sleep(120)
        """

    /// The attack: a subscriber that never reads its updates would have devaccessd buffer
    /// them without end. Once 64 KiB wait unsent it is closed instead.
    @Test func aSubscriberThatNeverReadsIsClosed() throws {
        let carol = try TestUser("subadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n[microphone]\nDefault=ask\n", admins: [carol])
        let mallory = try TestUser("subdeaf")
        let deaf = try mallory.background(Self.deafSubscriber, [setup.daemon.socketPath])
        #expect(deaf.report["first"] as? String == "update", "\(deaf.report)")
        let admin = try setup.daemon.client()
        let closed = "closing a subscriber that leaves its updates unread"
        for round in 0..<400 where !setup.daemon.log.contains(closed) {
            let permission: Permission = round % 2 == 0 ? .camera : .microphone
            _ = try admin.perform(.decide(DecisionOrder(allow: true, permission: permission, user: mallory.name)))
            _ = try admin.perform(.revoke(RevokeOrder(permission: permission, user: mallory.name)))
        }
        let deadline = Date().addingTimeInterval(10)
        while !setup.daemon.log.contains(closed) && Date() < deadline { usleep(20_000) }
        #expect(setup.daemon.log.contains(closed), "the unread updates were buffered instead")
        #expect(try admin.hello().server.hasPrefix("devaccessd"), "devaccessd still serves")
    }

    /// An expiry is pushed when devaccessd's timer ends the grant, and a node that goes away
    /// (the declared test devices' hotplug: inotify on their directory; udev's on a real
    /// machine) when devaccessd notices: the granted camera can no longer be used.
    @Test func anExpiryAndAVanishedDeviceArePushed() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("subexpiry")
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["watch", "camera"])
        #expect(try watch.waitForLines(1).first?["status"] as? String == "notDetermined")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name, "--for", "2s"] + setup.socket).status == 0)
        #expect(try watch.waitForLines(2).last?["status"] as? String == "authorized")
        let expired = try watch.waitForLines(3, timeout: 10)
        #expect(expired.last?["status"] as? String == "notDetermined", "\(expired)")
        #expect(try !erin.canOpen(setup.camera, .read))

        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name, "--always"] + setup.socket).status == 0)
        #expect(try watch.waitForLines(4).last?["status"] as? String == "authorized")
        try FileManager.default.removeItem(atPath: setup.camera)
        let gone = try watch.waitForLines(5, timeout: 10)
        #expect(gone.last?["status"] as? String != "authorized", "\(gone)")
        #expect((gone.last?["reasons"] as? [String])?.contains { $0.contains("no longer exists") } == true, "\(gone)")
    }

    /// A policy change (devaccess.conf edited) is pushed too: camera becomes restricted.
    @Test func aPolicyChangeIsPushed() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("subpolicy")
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["watch", "camera"])
        #expect(try watch.waitForLines(1).first?["status"] as? String == "notDetermined")
        try Data("[camera]\nDefault=deny\n".utf8).write(to: URL(fileURLWithPath: setup.config.path + "/devaccess.conf"))
        let changed = try watch.waitForLines(2)
        #expect(changed.last?["status"] as? String == "restricted", "\(changed)")
    }
}
