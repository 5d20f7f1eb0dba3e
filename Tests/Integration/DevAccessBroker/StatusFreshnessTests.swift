import Foundation
import Glibc
import Testing
import DevAccessTestSupport

/// devaccessd serves status from inputs it keeps (StatusInputsCache); truth first: after
/// every kind of change, the very next status reflects it. Real daemon, real users, real
/// nodes (mknod 1:3), real ACLs; each change is made the way an admin or a tool makes it
/// (setfacl, chmod, chown, usermod, gpasswd, an editor's write or rename, the root CLI,
/// mknod), and the status asked right after, as the user, on a connection of its own.
///
/// Before each change the status is asked three times, so that it is served from what
/// the daemon keeps (the first read sets its watches and is not kept; the second is kept;
/// the third is served from it).
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, groups, nodes and ACLs"))
struct StatusFreshnessTests {
    struct CameraStatus: CustomStringConvertible {
        var status: String
        var usable: Bool
        var reasons: [String]
        var description: String { "\(status) usable=\(usable) reasons=\(reasons)" }
        /// A ledger reason saying a standing grant allows the camera.
        var grantAllows: Bool { reasons.contains { $0.hasPrefix("ledger:") && $0.contains(" allows ") } }
    }

    /// `user`'s own camera status, asked on a fresh connection.
    static func camera(_ user: TestUser, _ setup: RequestSetup) throws -> CameraStatus {
        let request = #"{"version": 1, "id": 1, "type": "status", "permissions": ["camera"]}"#
        let output = try user.python(PythonClient.oneMessage, [setup.daemon.socketPath, request])
        guard output.status == 0, let reply = try json(output.stdout)["reply"] as? [String: Any],
              let permission = (reply["permissions"] as? [[String: Any]])?.first,
              let status = permission["status"] as? String else {
            throw SetupError("no status: \(output.stdout) \(output.stderr)")
        }
        let devices = permission["devices"] as? [[String: Any]] ?? []
        let reasons = (permission["reasons"] as? [[String: Any]] ?? []).map {
            "\($0["kind"] as? String ?? ""): \($0["message"] as? String ?? "")"
        }
        return CameraStatus(status: status, usable: devices.first?["usable"] as? Bool ?? false, reasons: reasons)
    }

    /// Three statuses in a row (so the last is served from what the daemon keeps); all must agree.
    static func settled(_ user: TestUser, _ setup: RequestSetup) throws -> CameraStatus {
        let first = try camera(user, setup)
        let second = try camera(user, setup)
        let third = try camera(user, setup)
        #expect(first.description == second.description && second.description == third.description,
                "the status changed with nothing changing: \(first) / \(second) / \(third)")
        return third
    }

    /// A change made the way an administrator would type it (a pipeline of commands):
    /// the names in it are the test's own. Fails the test when any step fails.
    @discardableResult
    static func shell(_ command: String) throws -> String {
        try TestProcess.setup("/bin/sh", ["-ec", command]).stdout
    }

    // MARK: - The nodes, by hand

    @Test func handMadeACLModeAndOwnerChangesShowInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshacl")
        let node = setup.camera
        let changes: [(String, Bool)] = [
            ("setfacl -m u:\(user.name):rw '\(node)'", true),
            ("setfacl -x u:\(user.name) '\(node)'", false),
            ("chmod o+rw '\(node)'", true),
            ("chmod o-rw '\(node)'", false),
            ("chown \(user.name) '\(node)'", true),
            ("chown root '\(node)'", false),
            ("setfacl -m g:nogroup:rw '\(node)'", true),  // the user's primary group
            ("setfacl -m m::r '\(node)'", false),  // the mask narrows the group entry
            ("setfacl -b '\(node)'", false),
        ]
        #expect(try !Self.settled(user, setup).usable)
        for (change, usable) in changes {
            let before = try Self.settled(user, setup)
            try Self.shell(change)
            let after = try Self.camera(user, setup)
            #expect(after.usable == usable, "after `\(change)` (before: \(before)): \(after)")
            #expect(try user.canOpen(node, .readWrite) == usable, "the kernel disagrees after `\(change)`")
        }
    }

    // MARK: - Accounts

    @Test func groupMembershipChangesShowInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshgrp")
        let group = try TestGroup("frshv", members: [])
        try Self.shell("chgrp \(group.name) '\(setup.camera)' && chmod 0660 '\(setup.camera)'")
        #expect(try !Self.settled(user, setup).usable)

        try Self.shell("usermod -aG \(group.name) \(user.name)")
        let added = try Self.camera(user, setup)
        #expect(added.usable, "after usermod -aG: \(added)")

        _ = try Self.settled(user, setup)
        try Self.shell("gpasswd -d \(user.name) \(group.name)")
        let removed = try Self.camera(user, setup)
        #expect(!removed.usable, "after gpasswd -d: \(removed)")
    }

    /// /etc/group written in place, not renamed (`echo ... >> /etc/group`, a tool that holds
    /// the file open while it writes): the next status has the new membership, asked
    /// while the writer still holds the file (no close event yet). The line added names
    /// the test's group's gid under a second name and is removed again (by rename, as
    /// shadow's tools do) under shadow's lock.
    @Test func aGroupWrittenInPlaceShowsInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshinp")
        let group = try TestGroup("frshinp", members: [])
        try Self.shell("chgrp \(group.name) '\(setup.camera)' && chmod 0660 '\(setup.camera)'")
        #expect(try !Self.settled(user, setup).usable)

        // The statuses are asked by one client process, each on a connection of its own, back
        // to back: the one after the write comes within milliseconds of the kept one, inside
        // the 1 s an identity lives even when NSS has other sources (as on this machine).
        let scratch = try TemporaryDirectory()
        let trigger = scratch.path + "/ask"
        let client = try user.background(Self.askOnTrigger, [setup.daemon.socketPath, trigger])
        defer { client.stop() }
        #expect(client.report["settled"] as? [Bool] == [false, false, false], "\(client.report)")

        let alias = "frshinpa\(getpid() % 100_000)"
        let writer = try AccountsFile.appendInPlace("/etc/group", "\(alias):x:\(group.gid):\(user.name)\n")
        defer { AccountsFile.removeLines("/etc/group", startingWith: alias + ":") }
        try Data().write(to: URL(fileURLWithPath: trigger))
        let added = try #require(try client.nextReport(timeout: 30), "the client did not ask again")
        close(writer)
        #expect(added["usable"] as? Bool == true, "after an in-place write to /etc/group (still open): \(added)")
    }

    /// Three camera statuses (each on a new connection), printed as {"settled": [usable...]};
    /// then, once the file argv[2] exists, one more, printed as {"usable": ...}.
    static let askOnTrigger = """
        import socket, sys, json, os, time
        path, trigger = sys.argv[1], sys.argv[2]
        def usable():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(path)
            s.sendall(json.dumps({"version": 1, "id": 1, "type": "status", "permissions": ["camera"]}).encode() + b"\\n")
            buf = b""
            while not buf.endswith(b"\\n"):
                d = s.recv(65536)
                if not d: break
                buf += d
            s.close()
            devices = json.loads(buf)["permissions"][0].get("devices") or []
            return bool(devices and devices[0].get("usable"))
        print(json.dumps({"settled": [usable() for _ in range(3)]}), flush=True)
        while not os.path.exists(trigger):
            time.sleep(0.002)
        print(json.dumps({"usable": usable()}), flush=True)
        time.sleep(600)
        """

    // MARK: - Policy

    @Test func policyEditsNewFilesAndRemovalsShowInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshpol")
        let main = setup.config.path + "/devaccess.conf"
        #expect(try Self.settled(user, setup).status == "notDetermined")

        // Written in place.
        try Data("[camera]\nDefault=deny\n".utf8).write(to: URL(fileURLWithPath: main))
        #expect(try Self.camera(user, setup).status == "restricted")

        // Renamed into place, as editors and package managers do.
        _ = try Self.settled(user, setup)
        try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: main), options: .atomic)
        #expect(try Self.camera(user, setup).status == "notDetermined")

        // A drop-in directory that did not exist, and a new file in it.
        _ = try Self.settled(user, setup)
        let dropIns = setup.config.path + "/conf.d"
        try Self.shell("mkdir '\(dropIns)' && printf '[camera]\\nDefault=deny\\n' > '\(dropIns)/50-local.conf'")
        #expect(try Self.camera(user, setup).status == "restricted")

        // The drop-in removed.
        _ = try Self.settled(user, setup)
        try Self.shell("rm '\(dropIns)/50-local.conf'")
        #expect(try Self.camera(user, setup).status == "notDetermined")
    }

    // MARK: - The ledger

    @Test func grantRevokeAndExpiryShowInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshled")
        #expect(try !Self.settled(user, setup).grantAllows)

        #expect(try TestProcess.devaccess(["grant", "camera", "--user", user.name] + setup.socket).status == 0)
        let granted = try Self.camera(user, setup)
        #expect(granted.grantAllows && granted.status == "authorized" && granted.usable, "after grant: \(granted)")

        _ = try Self.settled(user, setup)
        #expect(try TestProcess.devaccess(["revoke", "camera", "--user", user.name] + setup.socket).status == 0)
        let revoked = try Self.camera(user, setup)
        #expect(!revoked.grantAllows && !revoked.usable, "after revoke: \(revoked)")

        // A grant that runs out: the first status asked after its end no longer has it. The
        // statuses before it are judged only if they were answered before the end (under a
        // loaded CI machine three status commands have taken longer than a short term).
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--for", "5s"] + setup.socket)
            .status == 0)
        let expiry = try LiveEnforcementTests.newestExpiry(setup.stateDirectory)
        for _ in 0..<3 {
            let before = try Self.camera(user, setup)
            guard Date() < expiry else { break }
            #expect(before.grantAllows, "before the grant's end: \(before)")
        }
        while Date() < expiry { usleep(2_000) }
        let expired = try Self.camera(user, setup)
        #expect(!expired.grantAllows, "the first status after the expiry: \(expired)")
    }

    // MARK: - Hotplug

    @Test func aNodeRemovedAndMadeAgainShowsInTheNextStatus() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("frshnod")
        let node = setup.camera
        #expect(try !Self.settled(user, setup).usable)

        // Replugged with an ACL that lets the user in.
        try Self.shell("rm '\(node)' && mknod -m 0600 '\(node)' c 1 3 && setfacl -m u:\(user.name):rw '\(node)'")
        let replugged = try Self.camera(user, setup)
        #expect(replugged.usable, "after the node was made again with an entry: \(replugged)")

        // Gone.
        _ = try Self.settled(user, setup)
        try Self.shell("rm '\(node)'")
        let gone = try Self.camera(user, setup)
        #expect(!gone.usable, "after the node went: \(gone)")

        // Back without the entry.
        _ = try Self.settled(user, setup)
        try Self.shell("mknod -m 0600 '\(node)' c 1 3")
        let back = try Self.camera(user, setup)
        #expect(!back.usable, "after the node came back without the entry: \(back)")
        _ = try Self.settled(user, setup)
        try Self.shell("setfacl -m u:\(user.name):rw '\(node)'")
        #expect(try Self.camera(user, setup).usable, "the new node's ACL is watched too")
    }

    // MARK: - Attacks

    /// When watches cannot be set (inotify's watch limit reached: ENOSPC), status reads
    /// the machine again every time, says so in the log, and is never stale.
    @Test func withoutWatchesStatusReadsAgainAndSaysSo() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n",
                                     firstDaemonEnvironment: ["DEVACCESS_TEST_INOTIFY_FAIL": "ENOSPC"])
        let user = try TestUser("frshnow")
        #expect(try !Self.settled(user, setup).usable)
        try Self.shell("setfacl -m u:\(user.name):rw '\(setup.camera)'")
        #expect(try Self.camera(user, setup).usable)
        _ = try Self.settled(user, setup)
        try Self.shell("printf '[camera]\\nDefault=deny\\n' > '\(setup.config.path)/devaccess.conf'")
        #expect(try Self.camera(user, setup).status == "restricted")
        let log = setup.daemon.log
        for input in ["device reports", "decisions", "user identities"] {
            #expect(log.contains("cannot watch the status inputs") && log.contains(input),
                    "the log does not say that \(input) are read again: \(log)")
        }
    }

    /// A hostile user floods devaccessd with status requests from many connections; a
    /// change made meanwhile still shows in another user's very next status.
    @Test func aFloodOfStatusRequestsDoesNotHideAChange() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let victim = try TestUser("frshvic")
        let mallory = try TestUser("frshmal")
        let flood = try mallory.background(Self.flood, [setup.daemon.socketPath, "16"])
        defer { flood.stop() }
        for round in 0..<5 {
            let usable = round % 2 == 0
            _ = try Self.settled(victim, setup)
            try Self.shell("setfacl \(usable ? "-m" : "-x") u:\(victim.name)\(usable ? ":rw" : "") '\(setup.camera)'")
            let after = try Self.camera(victim, setup)
            #expect(after.usable == usable, "round \(round), under a flood: \(after)")
        }
        let answered = try #require(try flood.nextReport(timeout: 10))
        #expect((answered["answered"] as? Int ?? 0) > 100, "the flood did not run: \(answered)")
    }

    /// argv[2] connections, each sending status requests back to back; prints one line
    /// when all have been answered once, then every 2 s how many were answered.
    static let flood = """
        import socket, sys, json, threading, time
        path, n = sys.argv[1], int(sys.argv[2])
        count = [0]
        lock = threading.Lock()
        ready = threading.Barrier(n + 1)
        def run():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            first = True
            i = 0
            while True:
                i += 1
                s.sendall(json.dumps({"version": 1, "id": i, "type": "status"}).encode() + b"\\n")
                buf = b""
                while not buf.endswith(b"\\n"):
                    d = s.recv(65536)
                    if not d: return
                    buf += d
                with lock: count[0] += 1
                if first:
                    first = False
                    ready.wait()
        for _ in range(n):
            threading.Thread(target=run, daemon=True).start()
        ready.wait()
        print(json.dumps({"ready": True}), flush=True)
        time.sleep(2)
        while True:
            with lock: c = count[0]
            print(json.dumps({"answered": c}), flush=True)
            time.sleep(2)
        """
}

/// The real /etc account files edited the way a careless tool does (in place), under
/// shadow's lock (`lckpwdf`: a write lock on /etc/.pwd.lock) so that useradd and groupadd
/// of tests running at the same time neither lose nor clobber these lines.
enum AccountsFile {
    static func withShadowLock<T>(_ body: () throws -> T) throws -> T {
        let fd = open("/etc/.pwd.lock", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SetupError("cannot open /etc/.pwd.lock") }
        defer { close(fd) }  // releases the lock
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        guard fcntl(fd, F_SETLKW, &lock) == 0 else { throw SetupError("cannot lock /etc/.pwd.lock") }
        return try body()
    }

    /// Appends `line` in place and returns the descriptor, still open (the caller closes it).
    static func appendInPlace(_ path: String, _ line: String) throws -> CInt {
        try withShadowLock {
            let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
            guard fd >= 0 else { throw SetupError("cannot open \(path)") }
            let bytes = Array(line.utf8)
            guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
                close(fd)
                throw SetupError("cannot append to \(path)")
            }
            return fd
        }
    }

    /// Removes the lines that start with `prefix`: a new file with the same mode and owner,
    /// renamed into place (readers never see a partial file).
    static func removeLines(_ path: String, startingWith prefix: String) {
        _ = try? withShadowLock {
            var info = stat()
            guard stat(path, &info) == 0, let text = try? String(contentsOfFile: path, encoding: .utf8),
                  text.contains(prefix) else { return }
            let kept = text.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix(prefix) }
            let temporary = path + ".devaccess-test"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return }
            let bytes = Array(kept.joined(separator: "\n").utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let ready = written == bytes.count && fchown(fd, info.st_uid, info.st_gid) == 0
                && fchmod(fd, info.st_mode & 0o7777) == 0 && fsync(fd) == 0
            close(fd)
            if !ready || rename(temporary, path) != 0 { unlink(temporary) }
        }
    }
}
