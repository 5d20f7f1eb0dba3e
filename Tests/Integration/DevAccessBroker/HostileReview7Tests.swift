import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// The seventh hostile review (2026-12-07): an unprivileged local user, and processes it runs
/// in `devaccess run` and `devaccess run --strict`, against what the engine refactor changed:
/// the contract's status and queue paths, `--offline` for the queue, `--device` with a path,
/// and approvals racing their requester.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct HostileReview7Tests {
    static let queuePolicy = "[camera]\nDefault=allow\n[microphone]\nDefault=auth_admin\n"

    /// `devaccess ARGUMENTS` as `user` inside `unshare` with `unshareArguments` (a user namespace
    /// of its own), then as `inner` uid and gid there when given.
    static func inNamespace(_ user: TestUser, _ unshareArguments: [String], inner: Int? = nil,
                            _ arguments: [String]) throws -> ProcessOutput {
        let drop = inner.map { ["/usr/bin/setpriv", "--reuid=\($0)", "--regid=\($0)", "--clear-groups", "--"] } ?? []
        return try TestProcess.run("/usr/bin/setpriv", ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups",
                                                        "--", "/usr/bin/unshare"] + unshareArguments + drop
                                       + [TestProcess.devaccessBinary] + arguments)
    }

    // MARK: attack 1: another user's status and queue through the contract paths

    /// Attack 1: a plain user, a strict run of it and a subordinate uid of it (inside
    /// `unshare --map-auto`, the daemon's own-status fast path builds no caller) ask for alice's
    /// status, and the subordinate uid for its owner's. Each must be refused, and the fast
    /// path must answer for the asking uid only.
    @Test func noUserStrictRunNorSubordinateUIDSeesAnotherUsersStatus() throws {
        let setup = try RunTests.setup()
        let alice = try TestUser("h7alice")
        let mallory = try TestUser("h7mal")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", alice.name] + setup.socket).status == 0)

        let plain = try mallory.devaccess(["status", "--user", alice.name, "--json", "--broker"] + setup.socket)
        #expect(plain.status == 77 && !plain.stdout.contains("granted"), "a user read alice's status: \(plain.stdout)")
        let strict = try RunTests.run(mallory, setup, ["--camera", "--strict", "--", TestProcess.devaccessBinary,
                                                       "status", "--user", alice.name, "--json", "--broker"] + setup.socket)
        #expect(strict.status != 0 && strict.stdout.isEmpty,
                "a strict run read alice's status: \(String(decoding: strict.stdout, as: UTF8.self)) \(strict.stderr)")

        let first = 420_000_000 + (mallory.uid % 100_000) * 100
        let range = "\(first)-\(first + 99)"
        let added = try TestProcess.run("/usr/sbin/usermod", ["--add-subuids", range, "--add-subgids", range, mallory.name])
        try #require(added.status == 0, "\(added.stderr)")
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", range, "--del-subgids", range, mallory.name]) }
        let namespace = ["--map-auto", "--map-user=0"]
        for named in [alice.name, mallory.name] {
            let sub = try Self.inNamespace(mallory, namespace, inner: 5, ["status", "--user", named, "--json", "--broker"] + setup.socket)
            #expect(sub.status == 77, "a subordinate uid read \(named)'s status: \(sub.status) \(sub.stdout) \(sub.stderr)")
        }
        let own = try Self.inNamespace(mallory, namespace, inner: 5, ["status", "--json", "--broker"] + setup.socket)
        let document = try json(own.stdout)
        let uid = document["uid"] as? Int ?? -1
        #expect(own.status == 0 && uid != Int(mallory.uid) && uid != Int(alice.uid) && uid != 0,
                "the fast path answered a subordinate uid for another: \(own.stdout) \(own.stderr)")
    }

    /// Attack 1b: a strict run lists its user's queue and withdraws the user's request another
    /// program made: "a strict run acts for itself only", and withdrawing is ending its user's
    /// standing business, as revoke and reset are (hostile review 5).
    @Test func aStrictRunDoesNotWithdrawItsUsersQueuedRequest() throws {
        let setup = try RunTests.setup(Self.queuePolicy)
        let user = try TestUser("h7wd")
        let queued = try user.withoutTerminal(["request", "microphone", "--reason", "call at 3"] + setup.socket)
        #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        let request = try #require(try setup.ledger().pendingRequests().first)

        let withdraw = try RunTests.run(user, setup, ["--camera", "--strict", "--", TestProcess.devaccessBinary,
                                                      "withdraw", String(request.id)] + setup.socket)
        let after = try #require(try setup.ledger().pendingRequest(id: request.id))
        #expect(withdraw.status == 77 && withdraw.stderr.contains("strict"),
                "a strict camera run withdrew its user's microphone request: \(withdraw.status) \(withdraw.stderr)")
        #expect(after.isWaiting, "request \(request.id) is \(after.resolution?.rawValue ?? "?")")
        // The user itself still can.
        let own = try user.devaccess(["withdraw", String(request.id)] + setup.socket)
        #expect(own.status == 0, "\(own.stderr)")
    }

    // MARK: attack 2: the queue's --offline

    /// Attack 2: `pending`, `approve` and `reject` with `--offline` as a user (refused, 77, before
    /// anything is opened), and as root of a user namespace of its own (`unshare -r`: geteuid()
    /// is 0 there), aimed at devaccessd's own state directory and at its queued request. The
    /// kernel, not the CLI, holds the namespace's root: nothing may be listed or resolved.
    @Test func theQueuesOfflineCommandsGiveAUserNothing() throws {
        let setup = try RunTests.setup(Self.queuePolicy)
        let erin = try TestUser("h7erin")
        let mallory = try TestUser("h7off")
        let queued = try erin.withoutTerminal(["request", "microphone", "--reason", "private reason"] + setup.socket)
        #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        let request = try #require(try setup.ledger().pendingRequests().first)
        let state = setup.stateDirectory
        let elsewhere = ["--state-dir", state, "--socket", state + "/nobody.sock"]
        for command in [["pending", "--json"], ["approve", String(request.id)], ["reject", String(request.id), "--deny"]] {
            let plain = try mallory.devaccess(command + ["--offline"] + elsewhere)
            #expect(plain.status == 77 && plain.stderr.contains("needs root"), "\(command): \(plain.status) \(plain.stderr)")
            let nsRoot = try Self.inNamespace(mallory, ["-r"], command + ["--offline"] + elsewhere)
            #expect(nsRoot.status != 0 && !nsRoot.stdout.contains("private reason"),
                    "\(command) as root of a user namespace: \(nsRoot.status) \(nsRoot.stdout) \(nsRoot.stderr)")
        }
        let after = try #require(try setup.ledger().pendingRequest(id: request.id))
        #expect(after.isWaiting, "request \(request.id) is \(after.resolution?.rawValue ?? "?")")
        #expect(try setup.grants(erin).isEmpty && setup.ledger().grants(uid: erin.uid).isEmpty)
    }

    // MARK: attack 4: --device with a path of the user's

    /// Attack 4: an administrator grants with `--device` naming a path a user gave: a FIFO (would
    /// an open block the CLI?), a symlink to it, and a block node with a camera's numbers. Each
    /// is refused at once, naming no device, and nothing is granted.
    @Test func aDevicePathThatIsNoCharacterNodeNamesNoDeviceAndDoesNotHang() throws {
        let setup = try RunTests.setup()
        let mallory = try TestUser("h7dev")
        let place = try TemporaryDirectory()
        #expect(chmod(place.path, 0o777) == 0)
        let made = try mallory.python("""
            import os, sys
            os.mkfifo(sys.argv[1] + "/fifo")
            os.symlink(sys.argv[1] + "/fifo", sys.argv[1] + "/link")
            print("{}")
            """, [place.path])
        try #require(made.status == 0, "\(made.stderr)")
        #expect(try TestProcess.run("/usr/bin/mknod", [place.path + "/block", "b", "1", "3"]).status == 0)
        for name in ["fifo", "link", "block"] {
            let start = ContinuousClock.now
            let grant = try TestProcess.run("/usr/bin/timeout", ["20", TestProcess.devaccessBinary, "grant", "camera",
                                                                  "--user", mallory.name, "--device", place.path + "/" + name]
                                                + setup.socket, environment: ["DEVACCESS_TEST_DEVICES": setup.devices])
            let took = ContinuousClock.now - start
            #expect(grant.status == 64 && grant.stderr.contains("no character device"),
                    "--device \(name): \(grant.status) \(grant.stderr)")
            #expect(took < .seconds(10), "--device \(name) took \(took)")
        }
        #expect(try setup.grants(mallory).isEmpty)
    }

    // MARK: attack 5: approvals racing

    /// Attack 5: the requester withdraws while an administrator approves, over and over: each
    /// request ends one way, and a withdrawn one leaves no grant.
    @Test func aWithdrawRacingAnApprovalEndsOneWay() throws {
        let setup = try RunTests.setup(Self.queuePolicy)
        let erin = try TestUser("h7race")
        for _ in 0..<5 {
            let queued = try erin.withoutTerminal(["request", "microphone", "--for", "1h"] + setup.socket)
            #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
            let request = try #require(try setup.ledger().pendingRequests().first { $0.isWaiting })
            let id = String(request.id)
            let racing = try TestProcess.run("/bin/sh", ["-c", """
                "$1" approve "$2" --socket "$3" > /dev/null 2>&1 &
                setpriv --reuid="$4" --regid="$4" --clear-groups -- "$1" withdraw "$2" --socket "$3" > /dev/null 2>&1
                wait
                """, "sh", TestProcess.devaccessBinary, id, setup.daemon.socketPath, String(erin.uid)])
            #expect(racing.status == 0)
            let after = try #require(try setup.ledger().pendingRequest(id: request.id))
            let all = try setup.grants(erin)
            let grants = all.filter { $0.revoked == nil && $0.isActive(at: Date()) }
            switch after.resolution {
            case .approved?: #expect(grants.count == 1, "approved with grants \(grants), of \(all)")
            case .withdrawn?: #expect(grants.isEmpty, "withdrawn but granted: \(grants)")
            default: Issue.record("request \(request.id) ended \(after.resolution?.rawValue ?? "waiting")")
            }
            _ = try TestProcess.devaccess(["reset", "--user", erin.name] + setup.socket)
        }
    }

    /// Attack 5b: the requester's account is renamed while its request waits (and another
    /// account takes the old name): nothing is granted to the new holder of the name, nor, under
    /// a name that is no longer the requester's, to the uid.
    @Test func anApprovalAfterTheRequesterWasRenamedGrantsNobody() throws {
        let setup = try RunTests.setup(Self.queuePolicy)
        let erin = try TestUser("h7ren")
        let queued = try erin.withoutTerminal(["request", "microphone"] + setup.socket)
        #expect(queued.status == 4, "\(queued.stdout) \(queued.stderr)")
        let request = try #require(try setup.ledger().pendingRequests().first)
        let renamed = erin.name + "x"
        try #require(try TestProcess.run("/usr/sbin/usermod", ["-l", renamed, erin.name]).status == 0)
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["-l", erin.name, renamed]) }
        let made = try TestProcess.run("/usr/sbin/useradd", ["-M", "-N", "-g", "nogroup", "-s", "/usr/sbin/nologin", erin.name])
        try #require(made.status == 0, "\(made.stderr)")
        defer { TestProcess.cleanup("userdel", [erin.name]) }
        let squatter = try UserDatabase.identity(for: erin.name).uid
        let approved = try TestProcess.devaccess(["approve", String(request.id)] + setup.socket)
        #expect(approved.status != 0 && approved.stderr.contains("did not ask"), "\(approved.stderr)")
        #expect(try setup.ledger().grants(uid: squatter).isEmpty, "the new holder of the name was granted")
        #expect(try setup.ledger().grants(uid: erin.uid).isEmpty, "the renamed uid was granted")
        #expect(try setup.ledger().pendingRequest(id: request.id)?.isWaiting == true)
    }
}
