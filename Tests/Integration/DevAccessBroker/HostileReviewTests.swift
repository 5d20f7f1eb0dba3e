import Foundation
import Glibc
import Testing
import DevAccessLedger
import DevAccessTestSupport

/// Findings of the hostile review of 2026-12-01 (a hostile unprivileged local user and a
/// careless administrator against a real devaccessd): each test is the attack, run as real
/// users (`hx…`) against real nodes, and says what must not happen.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups, nodes and ACLs"))
struct HostileReviewTests {
    /// A camera node only root can open, declared to the daemon, a user, and a policy
    /// directory of root's that queues the camera for an administrator.
    final class Setup: @unchecked Sendable {
        let nodes: TemporaryDirectory
        let node: String
        let devices: String
        let config: TemporaryDirectory
        let user: TestUser

        init(_ tag: String) throws {
            nodes = try TemporaryDirectory()
            node = try nodes.makeNullNode("video0", mode: "0600")
            devices = try declareDevices([[
                "permission": "camera", "id": "camera:hostile", "name": "Hostile review camera",
                "nodes": [["path": node, "major": 1, "minor": 3]],
            ]], in: nodes)
            config = try TemporaryDirectory()
            try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: false,
                                                    attributes: [.posixPermissions: 0o755])
            try "[camera]\nDefault=auth_admin\n".write(toFile: config.path + "/devaccess.conf", atomically: false,
                                                       encoding: .utf8)
            user = try TestUser(tag, prefix: "hx")
        }

        func daemon(_ arguments: [String] = []) throws -> RunningDaemon {
            try RunningDaemon(arguments: ["--config-dir", config.path] + arguments,
                              environment: ["DEVACCESS_TEST_DEVICES": devices, "DEVACCESS_CONFIG_DIR": config.path])
        }

        var socket: [String] { [] }
    }

    /// A group of the test's own, for `--admin-group` (not devaccess-admin, which other
    /// suites add members to).
    final class Group {
        let name: String
        let gid: UInt32

        init() throws {
            name = "hxadm\(getpid() % 100_000)"
            _ = try? TestProcess.run("/usr/sbin/groupdel", [name])
            try TestProcess.setup("groupadd", [name])
            let text = try TestProcess.setup("getent", ["group", name]).stdout
            guard let gid = text.split(separator: ":").dropFirst(2).first.flatMap({ UInt32($0) }) else {
                throw SetupError("cannot read the gid of \(name): \(text)")
            }
            self.gid = gid
        }

        deinit { TestProcess.cleanup("groupdel", [name]) }
    }

    /// Runs the CLI as `user` holding exactly `groups` (a session started while the user was
    /// in them), or the groups a login gives now (`nil`).
    static func devaccess(_ user: TestUser, groups: [UInt32]?, _ arguments: [String],
                          socket: String, devices: String) throws -> ProcessOutput {
        let identity = groups.map { ["--groups=" + ([user.gid] + $0).map(String.init).joined(separator: ",")] }
            ?? ["--init-groups"]
        return try TestProcess.run("/usr/bin/setsid", ["-w", "/usr/bin/setpriv", "--reuid=\(user.uid)",
                                                       "--regid=\(user.gid)"] + identity
                                   + ["--", TestProcess.devaccessBinary] + arguments,
                                   environment: ["DEVACCESS_SOCKET": socket, "DEVACCESS_TEST_DEVICES": devices,
                                                 "DEVACCESS_GPSD": "127.0.0.1:9", "PATH": "/usr/bin:/bin"])
    }

    static func standingGrants(_ daemon: RunningDaemon, uid: UInt32) throws -> Int {
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        return try ledger.grants().filter { $0.subject.uid == uid }.count
    }

    // MARK: finding 1: an administrator removed from the group keeps the power in a session from before

    /// The administrator removes mallory from the admin group (`gpasswd -d`, `usermod -G`).
    /// A process of hers started before (a shell in tmux, a `sleep` left running that she
    /// later drives) still holds the group in its credentials: it must not be an
    /// administrator any more, neither approve her own queued request nor grant herself
    /// the camera. devaccessd took the process's credentials alone as proof.
    @Test func anAdministratorRemovedFromTheGroupIsNoneInASessionFromBefore() throws {
        let setup = try Setup("exadm")
        let group = try Group()
        let daemon = try setup.daemon(["--admin-group", group.name])
        let mallory = setup.user
        let socket = daemon.socketPath

        // While she is a member, a session of hers (and one started now) is an administrator.
        try TestProcess.setup("usermod", ["-a", "-G", group.name, mallory.name])
        let member = try Self.devaccess(mallory, groups: nil, ["pending", "--json"], socket: socket,
                                        devices: setup.devices)
        #expect(member.status == 0, "a member lists the queue: \(member.stderr)")

        // Removed. Her old session keeps the gid (the kernel's credentials do not change).
        try TestProcess.setup("gpasswd", ["-d", mallory.name, group.name])
        let oldSession = [group.gid]

        let queued = try Self.devaccess(mallory, groups: oldSession, ["request", "camera", "--for", "1h", "--json"],
                                        socket: socket, devices: setup.devices)
        let pending = try #require(try json(queued.stdout)["results"] as? [[String: Any]]).first?["pending"] as? Int
        #expect(pending != nil, "queued for an administrator: \(queued.stdout) \(queued.stderr)")

        let approved = try Self.devaccess(mallory, groups: oldSession, ["approve", String(pending ?? 0)],
                                          socket: socket, devices: setup.devices)
        #expect(approved.status != 0, "an ex-administrator approved her own request: \(approved.stdout)")
        let granted = try Self.devaccess(mallory, groups: oldSession,
                                         ["grant", "camera", "--user", mallory.name, "--for", "1h"],
                                         socket: socket, devices: setup.devices)
        #expect(granted.status != 0, "an ex-administrator granted herself the camera: \(granted.stdout)")
        #expect(try Self.standingGrants(daemon, uid: mallory.uid) == 0)
        #expect(try !mallory.canOpen(setup.node, .read))
        #expect(daemon.stop() == 0)
    }

    // MARK: finding 2: a policy file others can write is obeyed

    /// A careless administrator leaves `conf.d` writable by everyone (or a drop-in 0666).
    /// Any user then writes the policy: `Default=allow` for the camera, and the broker,
    /// which decides, grants it to whoever asks. The files devaccessd obeys must be root's
    /// alone (as sudo and sshd require of theirs); others are not applied, the last good
    /// policy stays in force and the log says why.
    @Test func aPolicyFileOthersCanWriteIsNotObeyed() throws {
        let setup = try Setup("polw")
        let daemon = try setup.daemon()
        let mallory = setup.user
        let socket = daemon.socketPath
        // After the start, the administrator "fixes" a permission problem the careless way.
        #expect(chmod(setup.config.path + "/conf.d", 0o777) == 0)
        let planted = try mallory.run("/bin/sh", ["-c",
            "printf '[camera]\\nDefault=allow\\n' > '\(setup.config.path)/conf.d/zz-mine.conf'"])
        #expect(planted.status == 0, "\(planted.stderr)")

        let asked = try Self.devaccess(mallory, groups: nil, ["request", "camera", "--for", "1h", "--json"],
                                       socket: socket, devices: setup.devices)
        let outcome = try #require(try json(asked.stdout)["results"] as? [[String: Any]]).first?["outcome"] as? String
        #expect(outcome != "granted", "a policy file mallory wrote granted her the camera: \(asked.stdout)")
        // The last good policy (root's: auth_admin) decides instead, and the log says why.
        #expect(outcome == "pending", "\(asked.stdout) \(asked.stderr)")
        #expect(daemon.log.contains("writable by its group or others"), "\(daemon.log)")
        #expect(try Self.standingGrants(daemon, uid: mallory.uid) == 0)
        #expect(try !mallory.canOpen(setup.node, .read))

        // Root's own file, left writable by others (0666), is refused the same way.
        unlink(setup.config.path + "/conf.d/zz-mine.conf")
        #expect(chmod(setup.config.path + "/conf.d", 0o755) == 0)
        let shared = setup.config.path + "/conf.d/50-shared.conf"
        try "[camera]\nDefault=auth_admin\n".write(toFile: shared, atomically: false, encoding: .utf8)
        #expect(chmod(shared, 0o666) == 0)
        let edited = try mallory.run("/bin/sh", ["-c", "printf '[camera]\\nDefault=allow\\n' > '\(shared)'"])
        #expect(edited.status == 0, "\(edited.stderr)")
        let again = try Self.devaccess(mallory, groups: nil, ["request", "camera", "--for", "1h", "--json"],
                                       socket: socket, devices: setup.devices)
        let second = try #require(try json(again.stdout)["results"] as? [[String: Any]]).first?["outcome"] as? String
        #expect(second != "granted", "a 0666 drop-in mallory edited granted her the camera: \(again.stdout)")
        #expect(second == "pending", "\(again.stdout) \(again.stderr)")
        #expect(try Self.standingGrants(daemon, uid: mallory.uid) == 0)
        #expect(daemon.stop() == 0)
    }

    // MARK: finding 3: one person fills the administrators' queue through subordinate uids

    /// As one user, in a user namespace of her own (`unshare --map-auto`: the 65,536
    /// subordinate uids useradd gave her), queue a request from each of 40 uids. Every one
    /// is a new waiting request (a uid's own are bounded: one per permission), so at the
    /// default change budget (60 a minute) she queues some 3,600 an hour with 1 KiB reasons,
    /// and within 20 minutes root's `devaccess pending` fails ("the reply would exceed
    /// 1048576 bytes"), for every user's requests, across restarts (the queue is in the
    /// ledger). The daemon here lifts the change budget so the test takes seconds: the cap
    /// that matters is on what waits, per person (`Peer.accountable`), not on the rate.
    @Test func onePersonCannotFillTheAdministratorsQueueFromSubordinateUIDs() throws {
        let setup = try Setup("flood")
        let daemon = try setup.daemon(["--max-changes-per-user", "100000"])
        let mallory = setup.user
        let flood = try Self.fromSubordinateUIDs(mallory, daemon, count: 40, marker: #""pending":"#)
        let queued = try json(flood.stdout)["queued"] as? Int ?? -1
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        let waiting = try ledger.pendingRequests(uid: nil).filter { $0.subject.uid != mallory.uid }.count
        #expect(queued == waiting)
        // 16 (`RequestSettings.maxQueuedPerPerson`): the flood got that far, and no further.
        #expect(waiting == 16, "one person queued \(waiting) waiting requests from subordinate uids")
        #expect(daemon.stop() == 0)
    }

    /// The per-person cap on waiting requests is counted from the ledger. When the queue
    /// cannot be read (here: a row root damaged by hand, a uid of -5, which the ledger refuses to
    /// decode), the count must not fall back to "none waiting": that would let every
    /// request past the cap while the insert, which reads nothing, still succeeds.
    @Test func anUnreadableQueueQueuesNothing() throws {
        let setup = try Setup("unreadq")
        let daemon = try setup.daemon()
        let ledgerPath = daemon.stateDirectory + "/" + Ledger.fileName
        let damaged = try TestProcess.run("/usr/bin/sqlite3", [ledgerPath, """
            INSERT INTO pending_requests (subject_uid, user_name, permissions, reason, created_usec)
            VALUES (-5, 'other', 'camera', '', 1);
            """])
        try #require(damaged.status == 0, "\(damaged.stderr)")
        let asked = try Self.devaccess(setup.user, groups: nil, ["request", "camera", "--for", "1h", "--json"],
                                       socket: daemon.socketPath, devices: setup.devices)
        #expect(!asked.stdout.contains(#""pending""#), "queued while the queue could not be read: \(asked.stdout)")
        #expect(asked.stderr.contains("cannot be read"), "\(asked.stdout) \(asked.stderr)")
        let rows = try TestProcess.run("/usr/bin/sqlite3", [ledgerPath,
                                                            "SELECT count(*) FROM pending_requests WHERE subject_uid = \(setup.user.uid)"])
        #expect(rows.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(rows.stdout)")
        #expect(daemon.stop() == 0)
    }

    /// `count` requests for the camera (`always`), each from a subordinate uid of `user`
    /// (1...count inside `unshare --map-auto`, as root of the namespace); prints how many
    /// replies held `marker`.
    static func fromSubordinateUIDs(_ user: TestUser, _ daemon: RunningDaemon, count: Int,
                                    marker: String) throws -> ProcessOutput {
        let script = """
            import socket, sys, json, os
            path, first, n, marker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode()
            queued = 0
            for u in range(first, first + n):
                pid = os.fork()
                if pid == 0:
                    os.setgroups([]); os.setgid(u); os.setuid(u)
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.connect(path)
                    s.sendall(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"],
                                          "scope": "always", "wait": False, "reason": "x" * 1000}).encode() + b"\\n")
                    buf = b""
                    s.settimeout(10)
                    while b"\\n" not in buf:
                        d = s.recv(65536)
                        if not d: break
                        buf += d
                    os._exit(0 if marker in buf else 1)
                _, status = os.waitpid(pid, 0)
                queued += status == 0
            print(json.dumps({"queued": queued}))
            """
        // useradd gives subordinate ids to users it numbers itself; the suite's users get a
        // range here, as `useradd` would have (a base no other test uses).
        let first = 400_000_000 + (user.uid % 100_000) * 1_000
        let range = "\(first)-\(first + 999)"
        let added = try TestProcess.run("/usr/sbin/usermod", ["--add-subuids", range, "--add-subgids", range, user.name])
        try #require(added.status == 0, "\(added.stderr)")
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", range, "--del-subgids", range, user.name]) }
        let flood = try TestProcess.run("/usr/bin/setpriv", ["--reuid=\(user.uid)", "--regid=\(user.gid)",
                                                            "--clear-groups", "--", "/usr/bin/unshare", "--map-auto",
                                                            "--map-user=0", "/usr/bin/python3", "-c", script,
                                                            daemon.socketPath, "1", String(count), marker])
        try #require(flood.status == 0, "the flood did not run: \(flood.stderr)")
        return flood
    }

    // MARK: finding 4: one person fills a node's ACL from subordinate uids

    /// Under a policy `allow` (here the camera), each of a user's subordinate uids gets a
    /// grant, and each grant is a `user:UID:rw-` entry on every node of the device. On the
    /// review's machine 504 entries filled an ext4 node's ACL (a tmpfs /dev holds some 8,000):
    /// after that every other user's grant was recorded but not applied ("writing the ACL
    /// failed: No space left on device"), and a full engine run took 2 s instead of
    /// milliseconds, so every expiry came that much later. The grants one person's
    /// namespaces hold together must be bounded.
    @Test func onePersonCannotFillANodesACLFromSubordinateUIDs() throws {
        let setup = try Setup("aclfill")
        try "[camera]\nDefault=allow\n".write(toFile: setup.config.path + "/devaccess.conf", atomically: false,
                                               encoding: .utf8)
        let daemon = try setup.daemon(["--max-changes-per-user", "100000"])
        let mallory = setup.user
        let flood = try Self.fromSubordinateUIDs(mallory, daemon, count: 40, marker: #""outcome":"granted""#)
        let granted = try json(flood.stdout)["queued"] as? Int ?? -1
        let ledger = try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        let theirs = try ledger.grants().filter { $0.subject.uid != mallory.uid }.count
        #expect(granted == theirs)
        // 16 (`RequestSettings.maxSubordinateGrantsPerPerson`): that far, and no further.
        #expect(theirs == 16, "one person's subordinate uids hold \(theirs) grants (ACL entries on the node)")
        let entries = try TestProcess.run("/usr/bin/getfacl", ["-cp", setup.node]).stdout
            .split(separator: "\n").filter { $0.hasPrefix("user:") && $0 != "user::rw-" }.count
        #expect(entries <= 16, "\(entries) user entries on the node")

        // Someone else still gets the camera.
        let bob = try TestUser("aclbob", prefix: "hx")
        let asked = try Self.devaccess(bob, groups: nil, ["request", "camera", "--for", "1h", "--json"],
                                       socket: daemon.socketPath, devices: setup.devices)
        #expect(asked.status == 0, "\(asked.stdout) \(asked.stderr)")
        #expect(try bob.canOpen(setup.node, .readWrite))
        #expect(daemon.stop() == 0)
    }

    // MARK: finding 5: an approval goes to whoever has the uid now

    /// alice queues a request for the camera, `always`; the administrator deletes her
    /// account, and the next `useradd` hands her uid to bob (it takes the highest uid + 1,
    /// which was hers). `devaccess pending` still says "alice", and approving it answered
    /// "request 1 of alice approved" while the ACL entry went to bob, until revoked.
    @Test func anApprovalDoesNotGoToWhoeverHasTheUIDNow() throws {
        let setup = try Setup("alice")
        let daemon = try setup.daemon()
        let alice = setup.user
        let environment = ["DEVACCESS_SOCKET": daemon.socketPath, "DEVACCESS_TEST_DEVICES": setup.devices,
                           "DEVACCESS_GPSD": "127.0.0.1:9"]
        let queued = try Self.devaccess(alice, groups: nil, ["request", "camera", "--always", "--json"],
                                        socket: daemon.socketPath, devices: setup.devices)
        let pending = try #require(try json(queued.stdout)["results"] as? [[String: Any]]).first?["pending"] as? Int
        let id = try #require(pending, "queued: \(queued.stdout) \(queued.stderr)")

        try TestProcess.setup("userdel", [alice.name])
        let bob = "hxbob\(getpid() % 100_000)"
        try TestProcess.setup("useradd", ["-M", "-N", "-u", String(alice.uid), "-g", "nogroup", "-s",
                                          "/usr/sbin/nologin", bob])
        defer { TestProcess.cleanup("userdel", [bob]) }

        let approved = try TestProcess.devaccess(["approve", String(id)], environment: environment)
        #expect(approved.status != 0, "alice's request was approved for \(bob): \(approved.stdout)")
        #expect(approved.stderr.contains("uid \(alice.uid) is \(bob)'s now"), "\(approved.stderr)")
        #expect(try Self.standingGrants(daemon, uid: alice.uid) == 0)
        #expect(!ACLProbe.hasUserEntry(setup.node, uid: alice.uid), "\(bob) got an ACL entry on the camera")
        // Declining records nothing, and is still possible.
        let declined = try TestProcess.devaccess(["reject", String(id)], environment: environment)
        #expect(declined.status == 0, "\(declined.stderr)")
        #expect(daemon.stop() == 0)
    }

    /// The same for a standing grant: alice holds the camera `always`; her account is
    /// deleted and bob gets her uid. The grant was alice's; bob must not inherit it (before:
    /// `reconcile` said "nothing to change" and bob's uid kept the ACL entry).
    @Test func aGrantDoesNotPassToTheNextOwnerOfTheUID() throws {
        let setup = try Setup("galice")
        let daemon = try setup.daemon()
        let alice = setup.user
        let environment = ["DEVACCESS_SOCKET": daemon.socketPath, "DEVACCESS_TEST_DEVICES": setup.devices,
                           "DEVACCESS_GPSD": "127.0.0.1:9"]
        let granted = try TestProcess.devaccess(["grant", "camera", "--user", alice.name], environment: environment)
        try #require(granted.status == 0, "\(granted.stderr)")
        #expect(ACLProbe.hasUserEntry(setup.node, uid: alice.uid))

        try TestProcess.setup("userdel", [alice.name])
        let bob = "hxgbob\(getpid() % 100_000)"
        try TestProcess.setup("useradd", ["-M", "-N", "-u", String(alice.uid), "-g", "nogroup", "-s",
                                          "/usr/sbin/nologin", bob])
        defer { TestProcess.cleanup("userdel", [bob]) }
        let reconciled = try TestProcess.devaccess(["reconcile"], environment: environment)
        #expect(reconciled.status == 0, "\(reconciled.stdout) \(reconciled.stderr)")
        #expect(!ACLProbe.hasUserEntry(setup.node, uid: alice.uid), "\(bob) inherited alice's camera grant")
        #expect(try Self.standingGrants(daemon, uid: alice.uid) == 0)
        #expect(daemon.stop() == 0)
    }
}
