import DevAccessSystem
import Foundation
import Glibc
import DevAccessLaunch

/// `devaccess run`'s launcher (fork, drop to nobody, exec) against posix_spawn and Foundation's
/// Process, each starting /bin/true and reaping it; medians of single launches.
enum LaunchBench {
    static func run(count: Int) {
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        guard null >= 0 else { fail("cannot open /dev/null") }
        defer { close(null) }
        let spec = LaunchSpec(executable: "/bin/true", arguments: ["true"], environment: ["PATH=/usr/bin:/bin"],
                              workingDirectory: "/", standardInput: null, standardOutput: null, standardError: null,
                              uid: 65534, gid: 65534, supplementaryGroups: [65534])
        func launching(_ spec: LaunchSpec) -> Double {
            median(count) {
                do {
                    let process = try ProgramLauncher.launch(spec)
                    guard try process.wait() == .exited(0) else { fail("/bin/true failed") }
                } catch {
                    fail("launch failed: \(error)")
                }
            }
        }
        let launcher = launching(spec)
        var asRoot = spec
        (asRoot.uid, asRoot.gid, asRoot.supplementaryGroups) = (0, 0, [0])
        let launcherAsRoot = launching(asRoot)
        let heldThenReleased = median(count) {
            do {
                let process = try ProgramLauncher.hold(spec).release()
                guard try process.wait() == .exited(0) else { fail("/bin/true failed") }
            } catch {
                fail("held launch failed: \(error)")
            }
        }
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("true"), nil]
        let envp: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin"), nil]
        defer {
            free(argv[0])
            free(envp[0])
        }
        let spawn = median(count) {
            var pid: pid_t = 0
            guard posix_spawn(&pid, "/bin/true", nil, nil, argv, envp) == 0 else { fail("posix_spawn failed") }
            var status: CInt = 0
            _ = valueOrErrno { waitpid(pid, &status, 0) }
        }
        let foundation = median(count) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/true")
            process.environment = ["PATH": "/usr/bin:/bin"]
            // terminationHandler, not waitUntilExit: that polls its run loop every 50 ms.
            let ended = DispatchSemaphore(value: 0)
            process.terminationHandler = { _ in ended.signal() }
            do { try process.run() } catch { fail("Process.run failed: \(error)") }
            ended.wait()
        }
        let anchor = "posix_spawn /bin/true + waitpid (no id change)"
        report.add("ProgramLauncher: fork, ids to nobody, exec /bin/true, reap (median of \(count))", launcher * 1000, "ms",
                   anchor: anchor, spawn * 1000)
        report.add("ProgramLauncher, as root (no id change)", launcherAsRoot * 1000, "ms", anchor: anchor, spawn * 1000)
        report.add("ProgramLauncher, held then released", heldThenReleased * 1000, "ms", anchor: anchor, spawn * 1000)
        report.add("Foundation Process (to its termination handler)", foundation * 1000, "ms", anchor: anchor, spawn * 1000)
    }

    private static func median(_ count: Int, _ body: () -> Void) -> Double {
        for _ in 0..<10 { body() }  // warm up: page cache, loader
        let times = (0..<count).map { _ in Measure.time(body) }.sorted()
        return times[times.count / 2]
    }
}
