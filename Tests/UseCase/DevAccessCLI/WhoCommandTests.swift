import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport

/// `devaccess who` through the real binary, while real processes of real users hold real
/// nodes open. The nodes are 1:8 (/dev/random) and 1:9 (/dev/urandom) made elsewhere: they
/// open, and `who` finds holders by device number machine-wide, so these are numbers no other
/// test's nodes use (NodeHoldersTests' 1:7 holder was listed here when both ran at once).
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: test users, device nodes"))
struct WhoCommandTests {
    let fx: AdminFixture

    init() throws {
        fx = try AdminFixture("who")
    }

    private func camera(_ name: String) throws -> String {
        let path = try fx.nodes.makeNode(name, major: 1, minor: 8)
        try fx.declare(name: name, path: path, major: 1, minor: 8)
        return path
    }

    private func holders(_ output: ProcessOutput) throws -> [[String: Any]] {
        #expect(output.status == 0, "\(output.stderr)")
        return try #require(try fx.json(output)["holders"] as? [[String: Any]])
    }

    @Test func rootSeesEveryHolderWithItsAccessAndItsRun() throws {
        let node = try camera("video0")
        let other = try fx.nodes.makeNode("elsewhere", major: 1, minor: 9)
        try fx.declare(name: "mic0", path: other, permission: "microphone", major: 1, minor: 9)
        let runGroup = RunGroups.first + 41
        let writer = try BackgroundProcess(shell: "exec 3<>'\(node)'; exec /bin/sleep 60", as: fx.alice)
        let reader = try BackgroundProcess(shell: "exec 5<'\(node)'; exec /bin/sleep 60", as: fx.alice)
        let run = try BackgroundProcess(shell: "exec 4<>'\(node)'; exec /bin/sleep 60", as: fx.alice,
                                        groups: [fx.alice.gid, runGroup])
        let bystander = try BackgroundProcess(shell: "exec 3<>'\(other)'; exec /bin/sleep 60", as: fx.alice)
        for process in [writer, reader, run, bystander] { try process.waitUntilRunning("/usr/bin/sleep") }

        let listed = try holders(try fx.run(["who", "camera", "--json"]))
        #expect(listed.compactMap { $0["pid"] as? Int }.sorted() == [writer.pid, reader.pid, run.pid].map(Int.init).sorted(),
                "the holder of another node is not listed")
        let byWriter = try #require(listed.first { $0["pid"] as? Int == Int(writer.pid) })
        #expect(byWriter["user"] as? String == fx.alice.name)
        #expect(byWriter["uid"] as? Int == Int(fx.alice.uid))
        #expect(byWriter["program"] as? String == "/usr/bin/sleep")
        #expect(byWriter["node"] as? String == node)
        #expect(byWriter["permission"] as? String == "camera")
        #expect(byWriter["device"] as? String == "camera:test-video0")
        #expect(byWriter["fd"] as? Int == 3)
        #expect(byWriter["access"] as? String == "rw-")
        #expect(byWriter["run"] == nil && byWriter["runGroup"] == nil)
        let byReader = try #require(listed.first { $0["pid"] as? Int == Int(reader.pid) })
        #expect(byReader["access"] as? String == "r--")
        let byRun = try #require(listed.first { $0["pid"] as? Int == Int(run.pid) })
        #expect(byRun["runGroup"] as? Int == Int(runGroup))
        #expect(byRun["run"] as? Int == 42, "group ids go out in order from RunGroups.first (run 1)")

        let table = try fx.run(["who", "camera"])
        #expect(table.status == 0)
        let lines = table.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("PID") == true)
        let runLine = try #require(lines.first { $0.hasPrefix("\(run.pid) ") })
        #expect(runLine.contains(fx.alice.name) && runLine.contains(" rw ") && runLine.hasSuffix("devaccess run 42"))
        let readerLine = try #require(lines.first { $0.hasPrefix("\(reader.pid) ") })
        #expect(readerLine.contains(" r ") && readerLine.hasSuffix(" -"))
        #expect(!table.stdout.contains("\(bystander.pid) "))

        // Asked about the microphone, the bystander is the one listed.
        let microphone = try holders(try fx.run(["who", "microphone", "--json"]))
        #expect(microphone.compactMap { $0["pid"] as? Int } == [Int(bystander.pid)])
    }

    @Test func nobodyHoldingItIsSaidAndIsNoError() throws {
        _ = try camera("video0")
        let table = try fx.run(["who", "camera"])
        #expect(table.status == 0, "\(table.stderr)")
        #expect(table.stdout.hasPrefix("nobody holds a camera node open"))
        #expect(try holders(try fx.run(["who", "camera", "--json"])).isEmpty)
    }

    /// Without root, a user's `who` reads its own processes only, and says how many it could not.
    @Test func aUserSeesTheirOwnProcessesAndIsToldOfTheOthers() throws {
        let bob = try TestUser("whob")
        let node = try camera("video0")
        let own = try BackgroundProcess(shell: "exec 3<'\(node)'; exec /bin/sleep 60", as: fx.alice)
        let others = try BackgroundProcess(shell: "exec 3<'\(node)'; exec /bin/sleep 60", as: bob)
        try own.waitUntilRunning("/usr/bin/sleep")
        try others.waitUntilRunning("/usr/bin/sleep")

        let output = try fx.run(as: fx.alice, ["who", "camera", "--json"])
        let listed = try holders(output)
        #expect(listed.compactMap { $0["pid"] as? Int } == [Int(own.pid)])
        let uninspected = try #require(try fx.json(output)["uninspected"] as? Int)
        #expect(uninspected >= 1, "bob's process at least")
        let table = try fx.run(as: fx.alice, ["who", "camera"])
        #expect(table.stdout.contains("processes could not be inspected (run as root to see every user's)")
                || table.stdout.contains("process could not be inspected (run as root to see every user's)"))
        #expect(!table.stdout.contains("\(others.pid) "))
        // Root sees both.
        let all = try holders(try fx.run(["who", "camera", "--json"])).compactMap { $0["pid"] as? Int }
        #expect(all == [own.pid, others.pid].map(Int.init).sorted())
    }

    @Test func badCommandLinesAreUsageErrors() throws {
        let unknown = try fx.run(["who", "camrea"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("unknown permission 'camrea' (did you mean 'camera'?)"))
        #expect(try fx.run(["who", "--users"]).status == 64)
        let help = try fx.run(["who", "--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: devaccess who"))
        #expect(try fx.run(["--help"]).stdout.contains("  who "))
    }

    /// This machine has no Yama (no /proc/sys/kernel/yama): doctor warns that a user's other
    /// processes can attach to a program devaccess run started.
    @Test(.enabled(if: access("/proc/sys/kernel/yama/ptrace_scope", F_OK) != 0, "Yama is active here"))
    func doctorWarnsWithoutYama() throws {
        _ = try camera("video0")  // the declared devices the fixture points doctor at
        let output = try fx.run(["doctor", "--json"])
        let checks = try #require(try fx.json(output)["checks"] as? [[String: Any]])
        let ptrace = try #require(checks.first { $0["name"] as? String == "ptrace" })
        #expect(ptrace["status"] as? String == "warn")
        let message = ptrace["message"] as? String ?? ""
        #expect(message.contains("Yama is absent"))
        #expect(message.contains("another process of the same user can ptrace a program started by devaccess run"))
        #expect(message.contains("kernel.yama.ptrace_scope=1"))
        #expect(try fx.run(["doctor"]).stdout.contains("warn  ptrace"))
    }
}
