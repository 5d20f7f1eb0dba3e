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
            #expect(try TestProcess.shell("chgrp \(video.name) '\(node)' && chmod 0660 '\(node)' && "
                + "setfacl -m u:\(foreign.name):rw '\(node)'").status == 0)
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
        #expect(try TestProcess.shell("setfacl -m u:\(foreign.name):r '\(setup.camera)'").status == 0)
        #expect(try Self.root(["switch", "camera", "off"], setup).status == 0)
        #expect(try !granted.canOpen(setup.camera, .read))
        #expect(try foreign.canOpen(setup.camera, .read))
        // Grants stay in the ledger; a new one is recorded but not applied while off.
        #expect(try setup.grants(granted).contains { $0.isActive(at: Date()) })
        #expect(try Self.root(["switch", "camera", "on"], setup).status == 0)
        #expect(try granted.canOpen(setup.camera, .readWrite))
    }
}
