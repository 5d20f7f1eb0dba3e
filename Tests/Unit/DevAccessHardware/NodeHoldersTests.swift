import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport

/// Who holds a node open, found in /proc while real processes of a real user hold real nodes.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users and device nodes"))
struct NodeHoldersTests {
    let directory: TemporaryDirectory
    let alice: TestUser

    init() throws {
        directory = try TemporaryDirectory()
        alice = try TestUser("holders")
    }

    @Test func findsTheHolderByDeviceNumberWithItsAccessAndNotOthers() throws {
        let camera = try directory.makeNode("video0", major: 1, minor: 7)
        let other = try directory.makeNode("video1", major: 1, minor: 5)
        // The same device under another path: the camera, opened behind devaccess's back.
        let alias = try directory.makeNode("alias", major: 1, minor: 7)
        let writer = try BackgroundProcess(shell: "exec 3<>'\(camera)'; exec /bin/sleep 60", as: alice)
        let reader = try BackgroundProcess(shell: "exec 4<'\(alias)'; exec /bin/sleep 60", as: alice)
        let bystander = try BackgroundProcess(shell: "exec 3<>'\(other)'; exec /bin/sleep 60", as: alice)
        // A descriptor that names the node without opening the device (O_PATH) holds nothing.
        let pather = try BackgroundProcess("/usr/bin/python3", ["-c", """
            import os; fd = os.open('\(camera)', os.O_PATH); os.set_inheritable(fd, True)
            os.execv('/bin/sleep', ['sleep', '60'])
            """])
        for process in [writer, reader, bystander, pather] { try process.waitUntilRunning("/usr/bin/sleep") }

        let scan = NodeHolders.scan(for: [WatchedNode(path: camera, major: 1, minor: 7)])
        let held = scan.holders.filter { [writer.pid, reader.pid, bystander.pid, pather.pid].contains($0.pid) }
        #expect(held.map(\.pid) == [writer.pid, reader.pid].sorted())
        let byWriter = try #require(held.first { $0.pid == writer.pid })
        #expect(byWriter.fd == 3)
        #expect(byWriter.access == .readWrite)
        #expect(byWriter.realUID == alice.uid && byWriter.effectiveUID == alice.uid)
        #expect(byWriter.userName == alice.name)
        #expect(byWriter.program == "/usr/bin/sleep")
        #expect(!byWriter.programDeleted)
        #expect(byWriter.command == "/bin/sleep")
        #expect(byWriter.node.path == camera && byWriter.openedPath == camera)
        #expect(byWriter.runGroup == nil)
        #expect(byWriter.startTicks == ProcessTable.entry(writer.pid)?.startTicks)
        let byReader = try #require(held.first { $0.pid == reader.pid })
        #expect(byReader.fd == 4)
        #expect(byReader.access == .read)
        #expect(byReader.node.path == camera, "matched by device number")
        #expect(byReader.openedPath == alias, "and the path it was opened by is reported")
        #expect(scan.uninspected == 0, "root reads every process")
    }

    /// A process carrying a group id from RunGroups was started by `devaccess run`.
    @Test func aProcessCarryingARunGroupIsMarked() throws {
        let camera = try directory.makeNode("video0", major: 1, minor: 7)
        let runGroup = RunGroups.first + 4242
        let run = try BackgroundProcess(shell: "exec 3<>'\(camera)'; exec /bin/sleep 60", as: alice,
                                        groups: [alice.gid, runGroup])
        try run.waitUntilRunning("/usr/bin/sleep")
        let holder = try #require(NodeHolders.scan(for: [WatchedNode(path: camera, major: 1, minor: 7)])
            .holders.first { $0.pid == run.pid })
        #expect(holder.runGroup == runGroup)
        #expect(RunProcesses.carrying(group: runGroup).map(\.pid) == [run.pid])
    }

    /// The program's file removed after it started: reported as deleted, by the link count, not the name.
    @Test func aDeletedProgramIsReportedAsSuch() throws {
        let camera = try directory.makeNode("video0", major: 1, minor: 7)
        let copy = directory.path + "/sleeper (deleted)"
        try TestProcess.setup("cp", ["/usr/bin/sleep", copy])
        try TestProcess.setup("cp", ["/usr/bin/sleep", "\(directory.path)/gone"])
        let named = try BackgroundProcess(shell: "exec 3<'\(camera)'; exec '\(copy)' 60", as: alice)
        let gone = try BackgroundProcess(shell: "exec 3<'\(camera)'; exec '\(directory.path)/gone' 60", as: alice)
        try named.waitUntilRunning(copy)
        try gone.waitUntilRunning(directory.path + "/gone")
        try TestProcess.setup("rm", ["\(directory.path)/gone"])
        let holders = NodeHolders.scan(for: [WatchedNode(path: camera, major: 1, minor: 7)]).holders
        let byNamed = try #require(holders.first { $0.pid == named.pid })
        #expect(byNamed.program == copy && !byNamed.programDeleted)
        let byGone = try #require(holders.first { $0.pid == gone.pid })
        #expect(byGone.program == directory.path + "/gone" && byGone.programDeleted)
    }
}

/// Yama's setting as doctor reads it, from a file standing in for the sysctl.
struct PtraceScopeTests {
    @Test func scopeZeroAndAbsentAreProblemsOneIsNot() throws {
        let directory = try TemporaryDirectory()
        let setting = directory.path + "/ptrace_scope"
        #expect(PtraceScope.problem(setting: setting)?.contains("Yama is absent") == true)
        try "0\n".write(toFile: setting, atomically: true, encoding: .utf8)
        #expect(PtraceScope.value(setting: setting) == 0)
        let zero = try #require(PtraceScope.problem(setting: setting))
        #expect(zero.contains("ptrace_scope is 0") && zero.contains("set kernel.yama.ptrace_scope=1"))
        for scope in ["1", "2", "3"] {
            try "\(scope)\n".write(toFile: setting, atomically: true, encoding: .utf8)
            #expect(PtraceScope.value(setting: setting) == Int(scope))
            #expect(PtraceScope.problem(setting: setting) == nil)
        }
    }
}
