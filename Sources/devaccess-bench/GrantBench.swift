import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation
import Glibc
import DevAccessSystem

/// Grants through the engine on real nodes (mknod 1:3) against `setfacl -m` on the same
/// number of nodes. The subject is `nobody`, so no user is created. Each figure is the
/// median of several rounds: single fsyncs on a shared disk vary by an order of magnitude.
enum GrantBench {
    static let subject = Principal(uid: 65534, name: "nobody")

    /// glibc's makedev() (a macro Swift cannot import).
    static func deviceNumber(major: UInt64, minor: UInt64) -> dev_t {
        dev_t(((major & 0xfff) << 8) | ((major & ~0xfff) << 32) | (minor & 0xff) | ((minor & ~0xff) << 12))
    }

    struct Round {
        var perGrant: Double
        var perRevoke: Double
        var allGrant: Double
        var perSetfacl: Double
        var allSetfacl: Double
    }

    static func run(devices count: Int, rounds: Int, in work: String) {
        let directory = work + "/nodes"
        mkdir(directory, 0o755)
        var declared: [DeclaredDevice] = []
        for index in 0..<count {
            let path = "\(directory)/video\(index)"
            guard mknod(path, S_IFCHR | 0o600, deviceNumber(major: 1, minor: 3)) == 0 else {
                fail("\(SystemCallError.current("mknod", path: path))")
            }
            declared.append(DeclaredDevice(permission: .camera, id: "camera:bench-\(index)", name: "bench \(index)",
                                           nodes: [DeclaredNode(path: path, major: 1, minor: 3)]))
        }
        let engine: Enforcer
        do {
            engine = Enforcer(ledger: try Ledger(path: work + "/grants.db", journal: .disabled),
                              devices: DeclaredDeviceSource(devices: declared),
                              actor: Principal(uid: 0, name: "root"))
        } catch {
            fail("cannot open a ledger: \(error)")
        }
        var results: [Round] = []
        for _ in 0..<rounds {
            results.append(measure(engine, declared))
        }
        func median(_ value: (Round) -> Double) -> Double {
            let sorted = results.map(value).sorted()
            return sorted[sorted.count / 2]
        }
        let perGrant = median(\.perGrant), allGrant = median(\.allGrant)
        let perSetfacl = median(\.perSetfacl), allSetfacl = median(\.allSetfacl)
        report.add("grant -> ACL entry, per device (\(count) device-scoped grants, median of \(rounds) rounds)",
                   perGrant * 1000, "ms", anchor: "setfacl -m, one process per node (shell loop)", perSetfacl * 1000)
        report.add("one grant over all \(count) devices", allGrant * 1000, "ms",
                   anchor: "one setfacl -m over \(count) nodes", allSetfacl * 1000)
        report.add("revoke -> entry removed, per device", median(\.perRevoke) * 1000, "ms",
                   anchor: "setfacl -m, one process per node (shell loop)", perSetfacl * 1000)
    }

    /// One round: each device granted and revoked on its own, then all at once; then the
    /// same entries with setfacl.
    private static func measure(_ engine: Enforcer, _ declared: [DeclaredDevice]) -> Round {
        let count = Double(declared.count)
        var failures = 0
        let grants = Measure.time {
            for device in declared {
                let request = Enforcer.DecisionRequest(subject: subject, permission: .camera, deviceID: device.id,
                                                       decision: .allow, scope: .always)
                if (try? engine.decide(request))?.report.changes.count != 1 { failures += 1 }
            }
        }
        let revokes = Measure.time {
            for device in declared {
                if (try? engine.revoke(permission: .camera, subject: subject, deviceID: device.id))?
                    .report.changes.count != 1 { failures += 1 }
            }
        }
        let all = Measure.time {
            let request = Enforcer.DecisionRequest(subject: subject, permission: .camera, decision: .allow, scope: .always)
            if (try? engine.decide(request))?.report.changes.count != declared.count { failures += 1 }
        }
        if (try? engine.revoke(permission: .camera, subject: subject))?.report.changes.count != declared.count {
            failures += 1
        }
        guard failures == 0 else {
            fail("\(failures) grant/revoke operation(s) did not change what was expected; no figures")
        }
        // The standard tool as a script runs it: one setfacl per node from a shell loop (the
        // shell starts once), and all nodes in one setfacl (its best case).
        let paths = declared.map { $0.nodes[0].path }
        let entry = "u:\(subject.uid):rw"
        var ok = true
        let loop = Measure.time {
            ok = Shell.run("/bin/sh", ["-c", "for f; do setfacl -m \(entry) \"$f\" || exit 1; done", "sh"] + paths)
        }
        ok = ok && Shell.run("/usr/bin/setfacl", ["-b"] + paths)
        let once = Measure.time { ok = ok && Shell.run("/usr/bin/setfacl", ["-m", entry] + paths) }
        ok = ok && Shell.run("/usr/bin/setfacl", ["-b"] + paths)
        guard ok else {
            fail("setfacl failed (apt install acl)")
        }
        return Round(perGrant: grants / count, perRevoke: revokes / count, allGrant: all, perSetfacl: loop / count,
                     allSetfacl: once)
    }
}
