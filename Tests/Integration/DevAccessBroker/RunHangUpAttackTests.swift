import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport

/// A run's program that tries to outlive its client: devaccessd hangs it up by its process
/// group, and the program may leave that group.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct RunHangUpAttackTests {
    /// The program forks a child that makes a group of its own, joins that group (so the
    /// run's group, its pid, is empty), ignores SIGHUP and sleeps with the camera open. When
    /// its client is killed, devaccessd's hang-up (SIGHUP, then SIGKILL after the grace, both
    /// to the run's group) reached nobody: the program kept running and the run kept its
    /// entry on the camera, a thread of devaccessd's and the run's ledger row, with no client
    /// and outside the per-user connection limit. The SIGKILL now also goes to the program
    /// itself (its pid cannot be reused: devaccessd reaps it only after the run's end).
    @Test func aProgramThatLeavesItsProcessGroupIsStillEndedWhenItsClientDies() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("runpgid")
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let ready = marks.path + "/ready"
        let script = """
            import os, signal, sys, time
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                os.setpgid(0, 0)
                os.write(w, b"x")
                time.sleep(120)
                os._exit(0)
            os.read(r, 1)
            os.setpgid(0, child)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            fd = os.open(sys.argv[1], os.O_RDWR)
            with open(sys.argv[2], "w") as f:
                f.write("%d %d" % (os.getpid(), child))
            time.sleep(120)
            """
        let background = try RunTests.runInBackground(user, setup, ["--camera", "--", "/usr/bin/python3", "-c", script,
                                                                    setup.camera, ready])
        #expect(LiveEnforcementTests.waitFor(20) {
            ((try? String(contentsOfFile: ready, encoding: .utf8)) ?? "").contains(" ")
        } != nil)
        let pids = ((try? String(contentsOfFile: ready, encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int32($0) }
        defer { for pid in pids { kill(pid, SIGKILL) } }
        #expect(pids.count == 2)
        #expect(try RunTests.runEntries(setup.camera).count == 1)

        #expect(kill(background.process.processIdentifier, SIGKILL) == 0)
        // Not `finish()`: the program holds the CLI's stderr, so reading it to its end would wait for the program.
        background.process.waitUntilExit()
        // The grace is 10 s; 30 s is a generous bound for the SIGKILL and the run's end.
        let gone = LiveEnforcementTests.waitFor(30) { (try? RunTests.runEntries(setup.camera).isEmpty) ?? false }
        #expect(gone != nil, "the run outlived its client by leaving its process group: \(setup.daemon.log)")
        if let program = pids.first {
            #expect(LiveEnforcementTests.waitFor(5) { kill(program, 0) != 0 } != nil, "the program \(program) still runs")
        }
        #expect(try setup.ledger().runs(uid: user.uid, includeEnded: false).isEmpty)
    }
}
