import Foundation
import Glibc
import Testing
import DevAccessLedger
import DevAccessTestSupport

/// Findings of the second hostile review (2026-12-01): a hostile unprivileged local user,
/// helped by a careless administrator, against a real devaccessd. Each test is the attack,
/// run as a real user against a real node, and says what must not happen.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and ACLs"))
struct HostileReview2Tests {
    typealias Setup = HostileReviewTests.Setup
    typealias LockHolder = LockedLedgerTests.LockHolder

    static let device = "camera:hostile"

    /// One `open` of the review's camera as `user`: whether a descriptor came back.
    static func opens(_ user: TestUser, _ daemon: RunningDaemon) throws -> (opened: Bool, reply: [String: Any]) {
        let answer = try #require(try DeviceOpenAttackTests.ask(user, daemon.socketPath, [
            DeviceOpenAttackTests.open("\"permission\":\"camera\",\"device\":\"\(device)\""),
        ]).first)
        let passed = answer["fds"] as? [Any] ?? []
        return (answer["type"] as? String == "opened" || !passed.isEmpty, answer)
    }

    // MARK: finding 1: `open` serves a grant whose ending the ledger could not record yet

    /// An administrator revokes (or denies, or resets) mallory's camera while something of
    /// root's holds the ledger's write lock (an `sqlite3` shell left open, a backup). The
    /// command says the access was removed and the record will follow (exit 75), the ACL
    /// entry is gone, and no reconcile brings it back. But the grant row still stands in the
    /// ledger until the record is written, and `open` read only the ledger: mallory asked
    /// devaccessd to open the camera for her and got the descriptor, again and again, for as
    /// long as the lock was held.
    @Test(arguments: [["revoke", "camera"], ["deny", "camera"], ["reset", "camera"]])
    func anEndingNotYetRecordedOpensNothing(_ command: [String]) throws {
        let setup = try Setup("h2end\(command[0].prefix(3))")
        let daemon = try setup.daemon()
        let mallory = setup.user
        let environment = ["DEVACCESS_SOCKET": daemon.socketPath, "DEVACCESS_TEST_DEVICES": setup.devices,
                           "DEVACCESS_GPSD": "127.0.0.1:9"]
        let granted = try TestProcess.devaccess(["grant", "camera", "--user", mallory.name, "--for", "1h"],
                                                environment: environment)
        try #require(granted.status == 0, "\(granted.stderr)")
        #expect(try Self.opens(mallory, daemon).opened, "the granted user's open works (else the test proves nothing)")

        let holder = try LockHolder(daemon)
        defer { holder.release() }
        let ended = try TestProcess.devaccess(command + ["--user", mallory.name], environment: environment)
        #expect(ended.status == 75, "\(ended.status) \(ended.stdout) \(ended.stderr)")
        #expect(try !mallory.canOpen(setup.node, .read), "the entry stayed behind the lock")
        let after = try Self.opens(mallory, daemon)
        #expect(!after.opened, "devaccessd opened the camera for mallory after '\(command[0])': \(after.reply)")
        holder.release()
        #expect(daemon.stop() == 0)
    }

    // MARK: finding 2: `open` serves a `once` grant whose process has exited

    /// Under a policy `allow`, mallory's program asks for the camera `once` (the grant lasts
    /// while that process runs) and exits. The engine ends the grant: its entry goes at
    /// once, the row's end is recorded when the ledger can be written. While it cannot (the
    /// write lock held, as above), the row still stands, and `open` served it to any other
    /// process of mallory's: a `once` grant that outlived its process. Location already
    /// asks /proc whether a `once` grant's process still runs; `open` must too.
    @Test func aOnceGrantWhoseProcessExitedOpensNothing() throws {
        let setup = try Setup("h2once")
        try "[camera]\nDefault=allow\n".write(toFile: setup.config.path + "/devaccess.conf", atomically: false,
                                               encoding: .utf8)
        let daemon = try setup.daemon()
        let mallory = setup.user
        let asker = try mallory.background("""
            import socket, sys, json, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            s.sendall(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"],
                                  "scope": "once", "wait": False}).encode() + b"\\n")
            f = s.makefile("rb")
            print(f.readline().decode().strip(), flush=True)
            time.sleep(300)
            """, [daemon.socketPath])
        let outcome = (asker.report["results"] as? [[String: Any]])?.first?["outcome"] as? String
        try #require(outcome == "granted", "\(asker.report)")
        #expect(try mallory.canOpen(setup.node, .read))

        let holder = try LockHolder(daemon)
        defer { holder.release() }
        asker.stop()
        let gone = LiveEnforcementTests.waitFor(10) { !ACLProbe.hasUserEntry(setup.node, uid: mallory.uid) }
        #expect(gone != nil, "the once grant's entry outlived its process: \(daemon.log)")
        let after = try Self.opens(mallory, daemon)
        #expect(!after.opened, "devaccessd opened the camera for a once grant whose process exited: \(after.reply)")
        holder.release()
        #expect(daemon.stop() == 0)
    }
    // MARK: finding 3: `run --strict` lets the program use a denied node opened for neither read nor write

    /// `open(path, 3)` (O_ACCMODE: neither read nor write, as `fdformat` uses it) asks the
    /// kernel for read and write permission on the file but gives a descriptor with neither
    /// mode, so Landlock, which handled only READ_FILE and WRITE_FILE, required no right for
    /// it. Under `--strict` the program opened the node of a permission it was not given
    /// (its user's group opens it) and its ioctls reached the driver: on a camera that is
    /// VIDIOC_REQBUFS with USERPTR buffers, QBUF, STREAMON, DQBUF: frames written into the
    /// program's own memory without read() or mmap(). With Landlock ABI 5 (Linux 6.10)
    /// devaccessd handles IOCTL_DEV too, so such a descriptor's ioctls are refused.
    @Test func strictLeavesNoIoctlOnADeniedNodeOpenedForNeitherReadNorWrite() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("h2strict")
        let audio = try TestGroup("h2audio", members: [user])
        #expect(chown(setup.microphone, 0, audio.gid) == 0 && chmod(setup.microphone, 0o660) == 0)
        let script = """
            import os, sys, fcntl, errno
            try:
                fd = os.open(sys.argv[1], 3)
            except OSError as e:
                print("open-refused"); sys.exit(0)
            try:
                fcntl.ioctl(fd, 0x5401, bytes(64))
                print("ioctl-reached-the-driver")
            except OSError as e:
                print("ioctl-refused" if e.errno == errno.EACCES else "ioctl-reached-the-driver")
            """
        let probe = ["/usr/bin/python3", "-c", script, setup.microphone]
        let loose = try RunTests.run(user, setup, ["--camera", "--"] + probe)
        #expect(String(decoding: loose.stdout, as: UTF8.self) == "ioctl-reached-the-driver\n",
                "without --strict the node's driver answers (else the test proves nothing): \(loose.stderr)")
        let strict = try RunTests.run(user, setup, ["--camera", "--strict", "--"] + probe)
        #expect(strict.status == 0, "\(strict.stderr)")
        let said = String(decoding: strict.stdout, as: UTF8.self)
        #expect(said == "ioctl-refused\n" || said == "open-refused\n",
                "under --strict the program reached a denied node's driver: \(said) \(strict.stderr)")
    }
    // MARK: finding 4: a run's group id handed to a user by /etc/subgid

    /// A careless administrator gives mallory subordinate group ids (`usermod
    /// --add-subgids`, for rootless containers) that reach into devaccess run's range
    /// (0x7A000000-0x7AFFFFFF). The ids are the runs' row ids in order, so the next run's is
    /// known. Mallory maps her subordinate gids into a user namespace of her own
    /// (`unshare --map-auto`: newgidmap) and, as its root, takes them all as supplementary
    /// groups: the kernel then names the run's id among her credentials, and while bob's run
    /// lasts she opens the camera its ACL entry gives to that id. RunGroups said "no
    /// /etc/group entry may use it (the daemon skips any that does)"; nothing skipped
    /// anything. A run must not get an id NSS names or /etc/subgid hands to someone.
    @Test func aRunsGroupIDIsNoneAnotherUserCanMapIn() throws {
        let setup = try RunTests.setup()
        let bob = try TestUser("h2runbob")
        let mallory = try TestUser("h2runmal")
        let ledgerPath = setup.daemon.stateDirectory + "/" + Ledger.fileName
        let sequence = try TestProcess.run("/usr/bin/sqlite3", [ledgerPath,
                                                                "SELECT seq FROM sqlite_sequence WHERE name = 'runs'"])
        let seq = try #require(UInt32(sequence.stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                               "\(sequence.stdout) \(sequence.stderr)")
        let next = 0x7A00_0000 + seq
        let subuids = 410_000_000 + (mallory.uid % 100_000) * 1_000
        let added = try TestProcess.run("/usr/sbin/usermod", [
            "--add-subuids", "\(subuids)-\(subuids + 999)", "--add-subgids", "\(next)-\(next + 3)", mallory.name,
        ])
        try #require(added.status == 0, "\(added.stderr)")
        defer {
            _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", "\(subuids)-\(subuids + 999)",
                                                           "--del-subgids", "\(next)-\(next + 3)", mallory.name])
        }

        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let ready = marks.path + "/ready"
        let run = try RunTests.runInBackground(bob, setup, ["--camera", "--", "/bin/sh", "-c",
                                                            ": > \"$1\"; exec sleep 30", "sh", ready])
        defer { kill(run.process.processIdentifier, SIGTERM); _ = run.finish() }
        let started = LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: ready) }
        try #require(started != nil, "bob's run did not start")
        let gid = try TestProcess.run("/usr/bin/sqlite3", [ledgerPath,
                                                           "SELECT gid FROM runs ORDER BY id DESC LIMIT 1"])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        // Mallory, in a user namespace of her own, takes every gid mapped into it.
        let attack = """
            import os, sys
            groups = []
            for line in open("/proc/self/gid_map"):
                inside, outside, count = map(int, line.split())
                groups += range(inside, inside + min(count, 4096))
            os.setgroups(groups)
            try:
                os.close(os.open(sys.argv[1], os.O_RDONLY))
                print("opened")
            except OSError as e:
                print("refused", e.strerror)
            """
        let tried = try TestProcess.run("/usr/bin/setpriv", [
            "--reuid=\(mallory.uid)", "--regid=\(mallory.gid)", "--clear-groups", "--", "/usr/bin/unshare",
            "--map-auto", "--map-user=0", "--map-group=0", "/usr/bin/python3", "-c", attack, setup.camera,
        ])
        try #require(tried.status == 0, "the attack did not run: \(tried.stdout) \(tried.stderr)")
        #expect(!tried.stdout.hasPrefix("opened"),
                "mallory opened bob's run's camera with a subordinate gid (run gid \(gid), hers \(next)-\(next + 3))")
        #expect(gid != String(next), "the run was given a gid /etc/subgid hands to mallory")
    }
    // MARK: finding 5: runs write the ledger outside the person's change budget

    /// A request that decides something is charged to the person's change budget
    /// (`--max-changes-per-user`, 60 a minute by default); `devaccess run` was not, though
    /// every run writes its row and some seven audit events (request, decision, acl_add,
    /// run_start, run_end, expiry, acl_remove for a policy `allow`). The review's loop of
    /// `devaccess run --camera -- /bin/true` (4 loops, one uid, debug build) made 183 runs in
    /// 20 s: 1,274 audit events and 4.4 MB of ledger and WAL, some 800 MB an hour, unbounded.
    @Test func runsAreChargedToThePersonsChangeBudget() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", daemonArguments: ["--max-changes-per-user", "5"])
        let mallory = try TestUser("h2runflood")
        var started = 0, busy = 0
        for _ in 0..<10 {
            let run = try RunTests.run(mallory, setup, ["--camera", "--", "/bin/true"])
            if run.status == 0 { started += 1 } else if run.stderr.contains("the most one user may") { busy += 1 }
        }
        let recorded = try setup.ledger().events().map(\.event).filter { $0.type == .runStart }.count
        #expect(recorded <= 5, "one user started \(recorded) runs with a budget of 5 changes a minute")
        #expect(started == recorded && busy == 10 - started, "started \(started), refused busy \(busy)")
    }
}
