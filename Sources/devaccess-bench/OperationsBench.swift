// devaccess-bench operations (root, a DEBUG devaccessd): what "one writer" costs.
// In one run, on one declared node (mknod 1:3):
//   - grant + revoke as protocol round trips through the broker (what the CLI sends);
//   - whole `devaccess grant` / `revoke` commands through the broker, against the same
//     commands with --offline (the engine in the command itself: the path every root
//     command took before devaccessd became the one writer);
//   - `setfacl -m` + `setfacl -x` processes on the same node: the standard tool;
//   - `devaccess status --json` for an unprivileged user (the ledger is private, so the
//     decisions come from the broker) against root's local read of the ledger.
import DevAccessCore
import DevAccessProtocol
import Foundation
import Glibc
import DevAccessInterface

extension HotplugBench {
    func operations(samples: Int) {
        guard getuid() == 0 else { return skipNeedsRoot("grant/revoke through devaccessd") }
        defer { finish() }
        let (_, node, environment) = declareCamera(id: "camera:bench-ops")
        let socket = work + "/broker.sock"
        let state = work + "/state"
        let cli = here.appendingPathComponent("devaccess").path
        let user = String(Self.uid)
        var daemonProcess = startDaemon(environment: environment)
        guard honoursTestDevices() else { return skipNoTestHook("grant/revoke through devaccessd") }

        // Protocol round trips: a grant and its revoke, as the CLI sends them.
        var grantTrips: [UInt64] = []
        var revokeTrips: [UInt64] = []
        do {
            let client = try BrokerClient(socketPath: socket, timeout: .seconds(30))
            for _ in 0..<samples {
                var start = now()
                _ = try client.perform(.decide(DecisionOrder(allow: true, permission: .camera, user: user)))
                grantTrips.append(now() - start)
                start = now()
                _ = try client.perform(.revoke(RevokeOrder(permission: .camera, user: user)))
                revokeTrips.append(now() - start)
            }
        } catch {
            fail("broker round trip: \(error)")
        }

        // Whole commands through the broker, and status as an unprivileged user and as root.
        let commandRuns = max(5, samples / 4)
        let viaBroker = pairs(commandRuns, cli, user, extra: [], environment: environment)
        var privateStatus: [UInt64] = []
        var rootStatus: [UInt64] = []
        for _ in 0..<commandRuns {
            var start = now()
            guard spawn("/usr/bin/setpriv", ["--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--clear-groups", "--",
                                             cli, "status", "camera", "--json"], environment: environment) else {
                fail("status as uid \(Self.uid) failed")
            }
            privateStatus.append(now() - start)
            start = now()
            guard spawn("/usr/bin/setpriv", ["--reuid=0", "--regid=0", "--keep-groups", "--", cli, "status", "camera", "--json",
                                             "--user", user], environment: environment) else {
                fail("root's status failed")
            }
            rootStatus.append(now() - start)
        }

        // The same commands with --offline, the daemon stopped.
        kill(daemonProcess.processIdentifier, SIGTERM)
        daemonProcess.waitUntilExit()
        let offline = pairs(commandRuns, cli, user, extra: ["--offline", "--state-dir", state], environment: environment)
        var setfacl: [UInt64] = []
        for _ in 0..<commandRuns {
            let start = now()
            guard spawn("/usr/bin/setfacl", ["-m", "u:\(Self.otherUID):rw", node]),
                  spawn("/usr/bin/setfacl", ["-x", "u:\(Self.otherUID)", node]) else { fail("setfacl failed") }
            setfacl.append(now() - start)
        }
        daemonProcess = startDaemon(environment: environment)

        func ms(_ sorted: [UInt64], _ p: Double) -> Double { percentile(sorted, p) / 1000 }
        let grant = grantTrips.sorted(), revoke = revokeTrips.sorted()
        let broker = viaBroker.sorted(), direct = offline.sorted(), tool = setfacl.sorted()
        let users = privateStatus.sorted(), root = rootStatus.sorted()
        let setfaclName = "setfacl -m + setfacl -x (processes) p50"
        report.add("decide (grant) round trip p50 (\(samples) round trips)", ms(grant, 0.5), "ms",
                   anchor: setfaclName, ms(tool, 0.5), note: String(format: "p99 %.2f ms", ms(grant, 0.99)))
        report.add("revoke round trip p50", ms(revoke, 0.5), "ms", anchor: setfaclName, ms(tool, 0.5),
                   note: String(format: "p99 %.2f ms", ms(revoke, 0.99)))
        report.add("grant+revoke commands via devaccessd p50 (\(commandRuns) pairs)", ms(broker, 0.5), "ms",
                   anchor: setfaclName, ms(tool, 0.5),
                   note: String(format: "p90 %.2f ms; via devaccessd / --offline %.2f", ms(broker, 0.9),
                                ms(broker, 0.5) / ms(direct, 0.5)))
        report.add("grant+revoke commands --offline p50", ms(direct, 0.5), "ms", anchor: setfaclName, ms(tool, 0.5),
                   note: String(format: "p90 %.2f ms", ms(direct, 0.9)))
        report.add("status camera as a user (answered by devaccessd) p50", ms(users, 0.5), "ms",
                   anchor: "status camera as root (reads the ledger) p50", ms(root, 0.5),
                   note: String(format: "p90 %.2f ms, root's p90 %.2f ms", ms(users, 0.9), ms(root, 0.9)))
    }

    /// `devaccess grant` then `devaccess revoke` for the bench user, `count` times: wall ns per pair.
    private func pairs(_ count: Int, _ cli: String, _ user: String, extra: [String],
                       environment: [String: String]) -> [UInt64] {
        var samples: [UInt64] = []
        for _ in 0..<count {
            let start = now()
            guard spawn(cli, ["grant", "camera", "--user", user] + extra, environment: environment),
                  spawn(cli, ["revoke", "camera", "--user", user] + extra, environment: environment) else {
                fail("devaccess grant/revoke \(extra.joined(separator: " ")) failed")
            }
            samples.append(now() - start)
        }
        return samples
    }
}
