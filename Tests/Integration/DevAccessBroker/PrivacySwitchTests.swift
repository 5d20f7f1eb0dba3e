import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// Privacy switches (`devaccess switch`) in the real daemon: real users (a member of the
/// node's group, a user with a devaccess grant, a user with a hand-made ACL entry), real
/// nodes (mknod 1:3), real opens, and the node's exact access (`getfacl -n`, `stat`) put
/// back afterwards.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users, groups and ACLs"))
struct PrivacySwitchTests {
    static let policy = "[camera]\nDefault=ask\n[microphone]\nDefault=ask\n"

    /// What `getfacl -n` and `stat` say about a node: the bytes compared before and after.
    static func access(_ path: String) throws -> String {
        let facl = try TestProcess.run("/usr/bin/getfacl", ["-n", path])
        let mode = try TestProcess.run("/usr/bin/stat", ["-c", "%a %g %u", path])
        return facl.stdout + mode.stdout
    }

    /// Holds argv[1] open (read) and reports; sleeps until killed.
    static let holdOpen = """
        import json, os, sys, time
        fd = os.open(sys.argv[1], os.O_RDONLY)
        print(json.dumps({"open": fd}), flush=True)
        time.sleep(600)
        """

    static func root(_ arguments: [String], _ setup: RequestSetup) throws -> ProcessOutput {
        try TestProcess.devaccess(arguments + setup.socket)
    }

    @Test func hardSwitchShutsEveryoneOutSurvivesRestartAndReplugAndPutsBackTheExactAccess() throws {
        let setup = try RequestSetup(policy: Self.policy)
        let member = try TestUser("swmem")
        let granted = try TestUser("swgrant")
        let foreign = try TestUser("swforeign")
        let video = try TestGroup("swvideo", members: [member])
        let camera = setup.camera
        func likeUdev(_ path: String? = nil) throws {
            // What udev and logind would set up: group video 0660, a uaccess-style entry.
            let node = path ?? camera
            try TestProcess.setup("chgrp", [video.name, node])
            try TestProcess.setup("chmod", ["0660", node])
            try TestProcess.setup("setfacl", ["-m", "u:\(foreign.name):rw", node])
        }
        try likeUdev()
        for permission in ["camera", "microphone"] {
            let grant = try Self.root(["grant", permission, "--user", granted.name], setup)
            #expect(grant.status == 0, "\(grant.stderr)")
        }
        for user in [member, granted, foreign] { #expect(try user.canOpen(camera, .readWrite), "\(user.name) before") }
        #expect(try granted.canOpen(setup.microphone, .readWrite))
        let before = try Self.access(camera)
        let micBefore = try Self.access(setup.microphone)

        // Someone has the camera open: the switch cannot close that, and says so.
        let holder = try granted.background(Self.holdOpen, [camera])
        defer { holder.stop() }
        let off = try Self.root(["switch", "camera", "off", "--hard", "--reason", "exam week"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        #expect(off.stdout.contains("camera") && off.stdout.contains("off --hard"), "\(off.stdout)")
        // (At least the holder: the test node is 1:3, the number of /dev/null, which many processes hold.)
        #expect(off.stderr.contains("process(es) still hold camera nodes open: devaccess who camera"), "\(off.stderr)")
        holder.stop()

        for user in [member, granted, foreign] { #expect(try !user.canOpen(camera, .read), "\(user.name) while off") }
        let whileOff = try Self.access(camera)
        #expect(whileOff.contains("600 ") && !whileOff.contains("user:\(foreign.uid)"), "\(whileOff)")
        // Not a capture node of the camera: untouched.
        #expect(try granted.canOpen(setup.microphone, .readWrite))
        #expect(try Self.access(setup.microphone) == micBefore)

        // Requests are answered restricted without a prompt; status says who and why.
        let asked = try foreign.onTerminal(["request", "camera"] + setup.socket)
        #expect(asked.exit == 5, "\(asked.output)")
        #expect(asked.prompts == 0, "\(asked.output)")
        #expect(asked.output.contains("switched off by root at"), "\(asked.output)")
        #expect(asked.output.contains("exam week"), "\(asked.output)")
        let status = try granted.devaccess(["status", "camera", "--broker", "--json"] + setup.socket)
        #expect(status.status == 0, "\(status.stdout) \(status.stderr)")
        let statuses = try json(status.stdout)["permissions"] as? [[String: Any]] ?? []
        #expect(statuses.first?["status"] as? String == "restricted", "\(status.stdout)")
        #expect(status.stdout.contains("switched off by root"), "\(status.stdout)")
        let micStatus = try granted.devaccess(["status", "microphone", "--broker", "--json"] + setup.socket)
        let micStatuses = try json(micStatus.stdout)["permissions"] as? [[String: Any]] ?? []
        #expect(micStatuses.first?["status"] as? String == "authorized", "\(micStatus.stdout)")

        // Non-admins may look, not switch: 77, audited.
        let shown = try member.devaccess(["switch", "--json"] + setup.socket)
        #expect(shown.status == 0, "\(shown.stderr)")
        let states = try json(shown.stdout)["switches"] as? [[String: Any]] ?? []
        let cameraState = states.first { $0["permission"] as? String == "camera" }
        #expect(cameraState?["state"] as? String == "off" && cameraState?["hard"] as? Bool == true, "\(shown.stdout)")
        #expect(cameraState?["reason"] as? String == "exam week")
        #expect(states.first { $0["permission"] as? String == "microphone" }?["state"] as? String == "on")
        let refused = try member.devaccess(["switch", "camera", "on"] + setup.socket)
        #expect(refused.status == 77, "\(refused.stdout) \(refused.stderr)")
        #expect(try setup.ledger().events().map(\.event).contains {
            $0.type == .refused && $0.details["operation"] == "switch" && $0.actor?.uid == member.uid
        })

        // udev re-applies its rules (a change event): the next pass takes it away again.
        try likeUdev()
        #expect(try foreign.canOpen(camera, .read), "the test's change did not give access back")
        let reconcile = try Self.root(["reconcile"], setup)
        #expect(reconcile.status == 0, "\(reconcile.stdout) \(reconcile.stderr)")
        for user in [member, granted, foreign] { #expect(try !user.canOpen(camera, .read), "\(user.name) after change") }

        // It survives a restart.
        try setup.restart()
        for user in [member, granted, foreign] { #expect(try !user.canOpen(camera, .read), "\(user.name) after restart") }
        #expect(try setup.ledger().switches().first?.hard == true)

        // A replug: the node comes back as udev sets it up (made aside, renamed into place,
        // as a udev event comes after its rules ran); the daemon turns it off on its own.
        #expect(unlink(camera) == 0)
        let fresh = try setup.nodes.makeNullNode("video0.new", mode: "0600")
        try likeUdev(fresh)
        #expect(rename(fresh, camera) == 0)
        let locked = LiveEnforcementTests.waitFor(10) { (try? foreign.canOpen(camera, .read)) == false }
        #expect(locked != nil, "the replugged node stayed open: \(setup.daemon.log)")
        for user in [member, granted, foreign] { #expect(try !user.canOpen(camera, .read), "\(user.name) after replug") }

        // On: everything as before, byte for byte.
        let on = try Self.root(["switch", "camera", "on"], setup)
        #expect(on.status == 0, "\(on.stdout) \(on.stderr)")
        for user in [member, granted, foreign] { #expect(try user.canOpen(camera, .readWrite), "\(user.name) after on") }
        #expect(try Self.access(camera) == before)
        #expect(try setup.ledger().savedNodeAccess().isEmpty)
        let types = try setup.ledger().events().map(\.event).map(\.type)
        #expect(types.contains(.switchOff) && types.contains(.switchOn))
    }

    @Test func aSwitchOffForAWhileTurnsBackOnByItself() throws {
        let setup = try RequestSetup(policy: Self.policy)
        let granted = try TestUser("swfor")
        #expect(try Self.root(["grant", "camera", "--user", granted.name], setup).status == 0)
        #expect(try granted.canOpen(setup.camera, .read))
        let off = try Self.root(["switch", "camera", "off", "--for", "2s"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        #expect(try !granted.canOpen(setup.camera, .read))
        let back = LiveEnforcementTests.waitFor(15) { (try? granted.canOpen(setup.camera, .read)) == true }
        #expect(back != nil, "still off: \(setup.daemon.log)")
        #expect(try setup.ledger().switches().isEmpty)
        #expect(try setup.ledger().events().map(\.event).contains {
            $0.type == .switchOn && $0.details["why"]?.contains("time ran out") == true
        })
    }

    /// A soft switch takes devaccess's own entries (user grants) away and leaves others' access.
    @Test func aSoftSwitchRemovesOnlyWhatDevaccessGave() throws {
        let setup = try RequestSetup(policy: Self.policy)
        let granted = try TestUser("swsoft")
        let foreign = try TestUser("swsoftf")
        #expect(try Self.root(["grant", "camera", "--user", granted.name], setup).status == 0)
        try TestProcess.setup("setfacl", ["-m", "u:\(foreign.name):r", setup.camera])
        #expect(try Self.root(["switch", "camera", "off"], setup).status == 0)
        #expect(try !granted.canOpen(setup.camera, .read))
        #expect(try foreign.canOpen(setup.camera, .read))
        // Grants stay in the ledger; a new one is recorded but not applied while off.
        #expect(try setup.grants(granted).contains { $0.isActive(at: Date()) })
        #expect(try Self.root(["switch", "camera", "on"], setup).status == 0)
        #expect(try granted.canOpen(setup.camera, .readWrite))
    }

    // MARK: - devaccess run and location

    /// A run of a switched-off permission is refused before anything is asked, run or recorded.
    @Test func aRunOfASwitchedOffPermissionIsRefusedAndNothingRunsOrIsRecorded() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("swrunoff")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let ran = marks.path + "/ran"
        let off = try Self.root(["switch", "camera", "off", "--reason", "exam"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        let result = try RunTests.run(user, setup, ["--camera", "--", "/bin/sh", "-c", ": > \"$1\"", "sh", ran])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("switched off by root at") && result.stderr.contains("exam"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: ran))
        #expect(try setup.grants(user).isEmpty)
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: true).isEmpty)
        #expect(try RunTests.runEntries(setup.camera).isEmpty)
        #expect(try !setup.ledger().events().map(\.event).contains {
            [.runStart, .grant, .aclAdd].contains($0.type) && $0.subject?.uid == user.uid
        })
    }

    /// A run that holds the camera when the switch goes off loses its node access at once: its
    /// group entry goes, so its program's next open fails (what it already has open stays open).
    @Test func aRunningRunLosesItsNodeAccessTheMomentTheSwitchGoesOff() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("swrunning")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let opened = marks.path + "/opened", go = marks.path + "/go"
        let reopened = marks.path + "/reopened", refused = marks.path + "/refused"
        // Opens the camera, waits for the word, then opens it again in a subshell (a failed
        // redirection of `exec` would end sh itself) and says how that went.
        let script = "exec 3<>\"$1\" || exit 9; : > \"$2\"; while [ ! -e \"$3\" ]; do sleep 0.05; done; "
            + "if ( exec 4<\"$1\" ) 2>/dev/null; then : > \"$4\"; else : > \"$5\"; fi; exit 0"
        let background = try RunTests.runInBackground(user, setup, ["--camera", "--", "/bin/sh", "-c", script, "sh",
                                                                    setup.camera, opened, go, reopened, refused])
        #expect(LiveEnforcementTests.waitFor(20) { FileManager.default.fileExists(atPath: opened) } != nil,
                "the run's program never opened the camera: \(setup.daemon.log)")
        #expect(try RunTests.runEntries(setup.camera).count == 1)
        let off = try Self.root(["switch", "camera", "off"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        // Gone by the time the switch command has returned: no waiting.
        #expect(try RunTests.runEntries(setup.camera).isEmpty)
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let (status, _, stderr) = background.finish()
        #expect(status == 0, "\(stderr)")
        #expect(FileManager.default.fileExists(atPath: refused), "the run's program opened the switched-off camera")
        #expect(!FileManager.default.fileExists(atPath: reopened))
        #expect(try RunTests.runEntries(setup.camera).isEmpty)
    }

    /// Location off: status says restricted, with who switched it off and why.
    @Test func locationOffMakesLocationRestricted() throws {
        let setup = try RequestSetup(policy: Self.policy)
        let user = try TestUser("swloc")
        // A receiver the daemon sees (the fixture's gpsd address has none, which is
        // 'unavailable' whatever the switch says), with a node the user may open.
        let receiver = try setup.nodes.makeNullNode("gps0", mode: "0666")
        var declared = try json(String(decoding: try Data(contentsOf: URL(fileURLWithPath: setup.devices)), as: UTF8.self))
        declared["devices"] = (declared["devices"] as? [[String: Any]] ?? []) + [
            ["permission": "location", "id": "location:test-gps0", "name": "Test GPS",
             "nodes": [["path": receiver, "major": 1, "minor": 3]]]]
        try JSONSerialization.data(withJSONObject: declared).write(to: URL(fileURLWithPath: setup.devices))
        try setup.restart()
        func status() throws -> (String?, String) {
            let out = try user.devaccess(["status", "location", "--broker", "--json"] + setup.socket)
            let statuses = try json(out.stdout)["permissions"] as? [[String: Any]] ?? []
            return (statuses.first?["status"] as? String, out.stdout)
        }
        #expect(try status().0 == "authorized")
        let off = try Self.root(["switch", "location", "off", "--reason", "travel"], setup)
        #expect(off.status == 0, "\(off.stdout) \(off.stderr)")
        let (now, text) = try status()
        #expect(now == "restricted", "\(text)")
        #expect(text.contains("switched off by root") && text.contains("travel"), "\(text)")
        #expect(try Self.root(["switch", "location", "on"], setup).status == 0)
        #expect(try status().0 == "authorized")
    }
}
