import Testing
import Foundation
import Glibc
import DevAccessCore
@testable import DevAccessSystem
import DevAccessTestSupport

/// Which processes hold a socket, from /proc (`socket:[INODE]`): how the gpsd endpoint
/// tells a `devaccess run`'s connection from its user's other ones.
@Suite(.serialized, .enabled(if: getuid() == 0, "reads every process's descriptors and makes users"))
struct SocketHoldersTests {
    static let runGroup = RunGroups.first + 77

    @Test func theProcessHoldingAConnectionIsFoundWithItsRunGroup() throws {
        let user = try TestUser("sockhold")
        let listener = try TCPListener(.loopback(family: AF_INET, port: 0))
        let holder = try BackgroundProcess("/usr/bin/setpriv", [
            "--reuid=\(user.uid)", "--regid=\(user.gid)", "--groups=\(Self.runGroup)", "--",
            "/usr/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/\(listener.address.port); exec sleep 30",
        ])
        defer { withExtendedLifetime(holder) {} }
        let connection = try TCPSocketOwnerTests.acceptOne(listener)
        defer { close(connection.descriptor) }
        let owner = try TCPSocketOwner.identity(of: connection.peer, connectedTo: connection.local)
        #expect(owner.uid == user.uid && owner.inode != 0)
        let scan = SocketHolders.scan(inode: owner.inode)
        #expect(scan.holders.map(\.pid) == [holder.pid], "\(scan)")
        #expect(scan.runGroup(uid: user.uid) == Self.runGroup)
        // Not the run's for anyone else, and devaccessd's own end is another socket.
        #expect(scan.runGroup(uid: user.uid + 1) == nil)
        let ours = SocketHolders.scan(inode: try TCPSocketOwner.identity(of: connection.local,
                                                                        connectedTo: connection.peer).inode)
        #expect(ours.holders.map(\.pid) == [getpid()])
    }

    @Test func aSocketIsOneRunsOnlyWhenEveryHolderIsInThatRunAsItsOwner() {
        let uid: UInt32 = 1234
        let inRun = SocketHolder(pid: 10, realUID: uid, effectiveUID: uid, groups: [100, Self.runGroup])
        let outside = SocketHolder(pid: 11, realUID: uid, effectiveUID: uid, groups: [100])
        let otherRun = SocketHolder(pid: 12, realUID: uid, effectiveUID: uid, groups: [Self.runGroup + 1])
        let setuid = SocketHolder(pid: 13, realUID: uid, effectiveUID: 0, groups: [Self.runGroup])
        func run(_ holders: [SocketHolder], incomplete: Bool = false) -> UInt32? {
            SocketHolderScan(holders: holders, incomplete: incomplete).runGroup(uid: uid)
        }
        #expect(run([inRun]) == Self.runGroup)
        #expect(run([inRun, inRun]) == Self.runGroup)
        #expect(run([inRun, outside]) == nil)
        #expect(run([outside, inRun]) == nil)
        #expect(run([inRun, otherRun]) == nil)
        #expect(run([inRun, setuid]) == nil)
        // Nobody holds it (closed, or in flight in an SCM_RIGHTS message), or a process could not be read.
        #expect(run([]) == nil)
        #expect(run([inRun], incomplete: true) == nil)
    }

    /// What the gpsd endpoint judges by: a holder set it could not see whole is `unknown`,
    /// never "others" (served at the user's level); a shared one names every run group in it.
    @Test func aSocketNobodyWasSeenHoldingIsUnknownAndASharedOneNamesItsRuns() {
        let uid: UInt32 = 1234
        let inRun = SocketHolder(pid: 10, realUID: uid, effectiveUID: uid, groups: [100, Self.runGroup])
        let outside = SocketHolder(pid: 11, realUID: uid, effectiveUID: uid, groups: [100])
        func holding(_ holders: [SocketHolder], incomplete: Bool = false) -> SocketHolding {
            SocketHolderScan(holders: holders, incomplete: incomplete).holding(uid: uid)
        }
        #expect(holding([inRun]) == .run(Self.runGroup))
        #expect(holding([inRun, outside]) == .others(runGroups: [Self.runGroup]))
        #expect(holding([outside]) == .others(runGroups: []))
        #expect(holding([]) == .unknown)
        #expect(holding([outside], incomplete: true) == .unknown)
    }

    /// The figure for docs/architecture.md: one scan with about 200 processes on the machine
    /// (sleepers are added up to that), printed, not asserted.
    @Test func oneScanWithAboutTwoHundredProcesses() throws {
        let present = (try FileManager.default.contentsOfDirectory(atPath: "/proc")).filter { Int($0) != nil }.count
        var sleepers: [BackgroundProcess] = []
        for _ in 0..<max(0, 200 - present) { sleepers.append(try BackgroundProcess("/usr/bin/sleep", ["60"])) }
        defer { withExtendedLifetime(sleepers) {} }
        let listener = try TCPListener(.loopback(family: AF_INET, port: 0))
        let holder = try BackgroundProcess("/usr/bin/bash", [
            "-c", "exec 3<>/dev/tcp/127.0.0.1/\(listener.address.port); exec sleep 30",
        ])
        defer { withExtendedLifetime(holder) {} }
        let connection = try TCPSocketOwnerTests.acceptOne(listener)
        defer { close(connection.descriptor) }
        let inode = try TCPSocketOwner.identity(of: connection.peer, connectedTo: connection.local).inode
        var times: [Double] = []
        for _ in 0..<50 {
            let start = ContinuousClock.now
            let scan = SocketHolders.scan(inode: inode)
            let elapsed = ContinuousClock.now - start
            #expect(scan.holders.map(\.pid) == [holder.pid])
            times.append(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000)
        }
        times.sort()
        let processes = (try FileManager.default.contentsOfDirectory(atPath: "/proc")).filter { Int($0) != nil }.count
        print("SocketHolders.scan with \(processes) processes: median \(times[times.count / 2]) ms, "
              + "p90 \(times[times.count * 9 / 10]) ms, max \(times[times.count - 1]) ms")
    }
}
