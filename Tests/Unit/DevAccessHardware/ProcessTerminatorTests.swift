import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport

/// Ending real processes: SIGTERM, the grace period, SIGKILL; never a process that took a
/// target's pid after it exited.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: sets ns_last_pid, starts processes as other groups"))
struct ProcessTerminatorTests {
    private func target(_ process: BackgroundProcess) throws -> ProcessTarget {
        let entry = try #require(ProcessTable.entry(process.pid))
        return ProcessTarget(pid: process.pid, startTicks: entry.startTicks)
    }

    @Test func aProcessThatIgnoresSIGTERMIsKilledAfterTheGrace() throws {
        let polite = try BackgroundProcess(shell: "exec /bin/sleep 60")
        let stubborn = try BackgroundProcess(shell: "trap '' TERM; exec /bin/sleep 60")
        try polite.waitUntilRunning("/usr/bin/sleep")
        try stubborn.waitUntilRunning("/usr/bin/sleep")
        let clock = ContinuousClock()
        let started = clock.now
        let outcomes = ProcessTerminator.terminate([try target(polite), try target(stubborn)], grace: .seconds(1))
        let took = clock.now - started
        #expect(outcomes.map(\.ending) == [.terminated, .killed])
        #expect(outcomes.map(\.target.pid) == [polite.pid, stubborn.pid])
        #expect(took >= .seconds(1), "the stubborn one had its grace period")
        polite.waitForExit()
        stubborn.waitForExit()
        #expect(polite.terminationSignal == SIGTERM)
        #expect(stubborn.terminationSignal == SIGKILL)
    }

    @Test func aTargetThatExitedIsNotSignalled() throws {
        let gone = try BackgroundProcess(shell: "exec /bin/sleep 60")
        try gone.waitUntilRunning("/usr/bin/sleep")
        let recorded = try target(gone)
        kill(gone.pid, SIGKILL)
        gone.waitForExit()
        #expect(ProcessTerminator.terminate([recorded], grace: .seconds(1)).map(\.ending) == [.notRunning])
    }

    /// The pid of an exited target given to a new process (ns_last_pid makes the kernel hand
    /// it out next): neither a handle opened before the exit nor the target itself reaches it.
    @Test func aReusedPidIsNeverSignalled() throws {
        let first = try BackgroundProcess(shell: "exec /bin/sleep 60")
        try first.waitUntilRunning("/usr/bin/sleep")
        let recorded = try target(first)
        let handle = try #require(ProcessHandle(recorded))
        kill(first.pid, SIGKILL)
        first.waitForExit()
        #expect(handle.hasExited)

        // A process is named by its pid and its start time in clock ticks (10 ms): a pid handed
        // out again within the same tick as the first process's start would look like it. Only
        // root can steer pids that way (ns_last_pid); wrapping around 4M pids in 10 ms is not a
        // real case. So the successor starts at least two ticks later.
        usleep(25_000)
        // Other processes on the machine may take the pid first: try again a few times.
        var successor: BackgroundProcess?
        for _ in 0..<50 where successor == nil {
            try "\(recorded.pid - 1)".write(toFile: "/proc/sys/kernel/ns_last_pid", atomically: false, encoding: .utf8)
            let candidate = try BackgroundProcess("/bin/sleep", ["60"])
            if candidate.pid == recorded.pid { successor = candidate }
        }
        let reused = try #require(successor, "could not get pid \(recorded.pid) handed out again")
        try reused.waitUntilRunning("/usr/bin/sleep")
        let started = try #require(ProcessTable.entry(reused.pid)).startTicks
        try #require(started != recorded.startTicks, "the successor started in the first one's clock tick")

        #expect(throws: Errno(rawValue: ESRCH)) { try handle.signal(SIGKILL).get() }
        #expect(ProcessHandle(recorded) == nil)
        #expect(ProcessTerminator.terminate([recorded], grace: .zero).map(\.ending) == [.notRunning])
        usleep(200_000)
        #expect(reused.isRunning, "the process now holding pid \(recorded.pid) was not signalled")
    }

    /// A run's whole tree, found by its group id however it detached, ended; nothing else.
    @Test func aRunIsEndedByItsGroupIncludingDetachedDescendants() throws {
        let runGroup = RunGroups.first + 777_001
        let leader = try BackgroundProcess(shell: "trap '' TERM; /usr/bin/setsid /bin/sh -c 'trap \"\" TERM; exec /bin/sleep 60' & exec /bin/sleep 60",
                                           groups: [runGroup])
        let outsider = try BackgroundProcess(shell: "exec /bin/sleep 60", groups: [RunGroups.first + 777_002])
        try leader.waitUntilRunning("/usr/bin/sleep")
        try outsider.waitUntilRunning("/usr/bin/sleep")
        var members: [ProcessTarget] = []
        for _ in 0..<500 where members.count < 2 {
            members = RunProcesses.carrying(group: runGroup).filter {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\($0.pid)/exe")) == "/usr/bin/sleep"
            }
            usleep(10_000)
        }
        #expect(members.count == 2, "the leader and its setsid'd descendant")
        #expect(members.contains { $0.pid == leader.pid })

        let outcomes = RunProcesses.end(group: runGroup, grace: .milliseconds(300))
        #expect(Set(outcomes.map(\.target)).isSuperset(of: members))
        #expect(outcomes.allSatisfy { $0.ending == .killed || $0.ending == .terminated || $0.ending == .notRunning })
        #expect(outcomes.contains { $0.target.pid == leader.pid && $0.ending == .killed })
        #expect(RunProcesses.carrying(group: runGroup).isEmpty)
        #expect(outsider.isRunning)
    }
}
