import Foundation
import Glibc
import Testing
import DevAccessTestSupport
import DevAccessSystem
@testable import DevAccessCLI

/// "cannot reach devaccessd" says how to start it on this machine: systemctl only where
/// systemd runs, and the socket path once.
struct DaemonStartTests {
    @Test func systemctlOnlyWhereSystemdRuns() throws {
        let systemd = try TemporaryDirectory()
        #expect(DaemonStart.advice(systemdRuntime: systemd.path) == "start it: sudo systemctl start devaccessd")
        let without = DaemonStart.advice(systemdRuntime: systemd.path + "/none")
        #expect(!without.contains("systemctl") && without.contains("no systemd here")
                    && without.contains("devaccessd 2>>/var/log/devaccessd.log &"), "\(without)")
    }

    @Test func unreachableNamesTheSocketOnceAndTheWayToStartIt() throws {
        let socket = "/nonexistent/broker.sock"
        let result = try TestProcess.run(TestProcess.devaccessBinary, ["pending", "--socket", socket])
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.components(separatedBy: socket).count == 2, "\(result.stderr)")
        #expect(result.stderr.contains(DaemonStart.advice()), "\(result.stderr)")
        let systemd = access(DaemonStart.systemdRuntime, F_OK) == 0
        #expect(result.stderr.contains("systemctl") == systemd, "\(result.stderr)")
    }
}
