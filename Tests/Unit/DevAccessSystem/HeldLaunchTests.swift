import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import Foundation
import Glibc
import Testing
import DevAccessLaunch

/// Held launches: devaccessd gets the pid of a child that is already the user, in its own
/// group, in its directory, and runs nothing until released.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users, switches ids"))
struct HeldLaunchTests {
    let user: TestUser
    let directory: TemporaryDirectory
    let launch: Launch

    init() throws {
        user = try TestUser("held")
        directory = try TemporaryDirectory()
        launch = Launch(user: user, groups: [user.gid, testRunGroup()])
    }

    /// The pipes of one held program; the test keeps the read ends.
    struct Pipes {
        let input = try? TestPipe(), output = try? TestPipe(), errors = try? TestPipe()

        func spec(_ launch: Launch, _ executable: String, _ arguments: [String]) throws -> LaunchSpec {
            guard let input, let output, let errors else { throw SetupError("pipe") }
            return launch.spec(executable, arguments, stdin: input.readEnd, stdout: output.writeEnd, stderr: errors.writeEnd)
        }

        func parentCopiesClosed() {
            input?.closeRead()
            input?.closeWrite()
            output?.closeWrite()
            errors?.closeWrite()
        }
    }

    @Test func heldIsTheUserAlreadyButRunsNothingUntilReleased() throws {
        let marker = directory.path + "/ran"
        chmod(directory.path, 0o777)
        let pipes = Pipes()
        var here = launch
        here.workingDirectory = directory.path
        let held = try ProgramLauncher.hold(try pipes.spec(here, "/bin/sh", ["sh", "-c", "touch ran; echo ran"]))
        pipes.parentCopiesClosed()
        let pid = held.pid
        // Still this test's own code (not exec'd), yet already the user, its group leader, in its directory.
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
                == FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        #expect(try statusField("Uid", of: pid) == "\(user.uid)\t\(user.uid)\t\(user.uid)\t\(user.uid)")
        #expect(try statusField("NSpgid", of: pid) == String(pid))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd") == directory.path)
        #expect(try openDescriptors(of: pid).count == 5, "0-2, the report pipe and the gate")
        #expect(access(marker, F_OK) != 0)

        let process = try held.release()
        #expect(process.pid == pid)
        #expect(try pipes.output?.read() == Array("ran\n".utf8))
        #expect(try process.wait() == .exited(0))
        #expect(access(marker, F_OK) == 0)
        #expect(throws: LaunchError.self) { try held.release() }
    }

    @Test func anAbandonedProgramNeverRunsAndIsReaped() throws {
        chmod(directory.path, 0o777)
        let marker = directory.path + "/ran"
        let pipes = Pipes()
        let held = try ProgramLauncher.hold(try pipes.spec(launch, "/usr/bin/touch", ["touch", marker]))
        pipes.parentCopiesClosed()
        let pid = held.pid
        held.abandon()
        var status: CInt = 0
        #expect(waitpid(pid, &status, WNOHANG) == -1 && errno == ECHILD, "reaped by abandon")
        #expect(access(marker, F_OK) != 0)
        #expect(throws: LaunchError.self) { try held.release() }
    }

    @Test func droppingAHeldLaunchAbandonsIt() throws {
        let pipes = Pipes()
        var pid: Int32 = 0
        do {
            let held = try ProgramLauncher.hold(try pipes.spec(launch, "/bin/true", ["true"]))
            pid = held.pid
        }
        var status: CInt = 0
        #expect(pid > 0 && waitpid(pid, &status, WNOHANG) == -1 && errno == ECHILD)
    }

    /// Setup failures come from hold (before devaccessd records anything); exec's from release.
    @Test func setupFailsAtHoldExecAtRelease() throws {
        var missing = launch
        missing.workingDirectory = directory.path + "/gone"
        let pipes = Pipes()
        let setup = try #require(throws: LaunchError.self) {
            try ProgramLauncher.hold(try pipes.spec(missing, "/bin/true", ["true"]))
        }
        #expect(setup.step == .chdir && setup.errno == .noSuchFile)

        let held = try ProgramLauncher.hold(try pipes.spec(launch, "/usr/bin/no-such-program", ["x"]))
        let exec = try #require(throws: LaunchError.self) { try held.release() }
        #expect(exec.step == .exec && exec.errno == .noSuchFile)
        #expect(exec.description.hasPrefix("/usr/bin/no-such-program: no such file"))
    }

    /// After setuid the held child is the user's, who may kill it: release then hands back a
    /// program that ended by that signal (nothing ran).
    @Test func aHeldChildKilledBeforeReleaseEndsBySignal() throws {
        let pipes = Pipes()
        let held = try ProgramLauncher.hold(try pipes.spec(launch, "/bin/true", ["true"]))
        pipes.parentCopiesClosed()
        #expect(kill(held.pid, SIGKILL) == 0)
        let process = try held.release()
        #expect(try process.wait() == .signaled(SIGKILL, coreDumped: false))
    }

    /// A signal for the run reaches the program's whole group (a background child too), and
    /// none is sent once the program was reaped.
    @Test func signalsGoToTheGroupWhileThePidIsOurs() throws {
        let running = try launch.start("/bin/sh", ["sh", "-c", "sleep 60 & echo started; wait"])
        #expect(try running.stdout.read(upTo: 8) == Array("started\n".utf8))
        #expect(running.process.signalGroup(SIGTERM))
        // EOF only once sh and the background sleep (which holds stdout too) both ended.
        #expect(try running.stdout.read() == [])
        #expect(try running.process.wait() == .signaled(SIGTERM, coreDumped: false))
        #expect(!running.process.signalGroup(SIGTERM))
    }
}
