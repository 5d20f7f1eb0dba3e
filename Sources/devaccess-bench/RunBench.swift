// devaccess-bench run (root, a devaccessd that honours DEVACCESS_TEST_DEVICES): what
// `devaccess run --camera -- /bin/true` costs over starting /bin/true directly. In one run,
// interleaved, each as the unprivileged bench user (setpriv, the same wrapper for all):
//   - plain exec: setpriv -> /bin/true (the anchor every other figure is compared with);
//   - a cold `devaccess --version`: what starting the CLI alone costs;
//   - `devaccess run --camera -- /bin/true`: policy decision (Default=allow), the run and its
//     `once` grant recorded, the program held before exec, its group's ACL entry on the
//     declared node (mknod 1:3), exec, exit, entry removed, run ended, then the CLI exits;
//   - `bwrap --dev-bind / / true` where bubblewrap is installed;
//   - `systemd-run --pipe --wait true` only where systemd is the service manager (it needs
//     one; as root, since it asks the system manager).
// Optimized figures need the test hook compiled in:
//   swift build -c release -Xswiftc -DDEBUG && sudo .build/release/devaccess-bench run
import DevAccessProtocol
import Foundation
import Glibc

extension HotplugBench {
    /// One way of starting /bin/true, measured `samples` times.
    struct Starter {
        var label: String
        var program: String
        var arguments: [String]
        var samples: [UInt64] = []
    }

    func runs(samples: Int) {
        guard getuid() == 0 else { return skipNeedsRoot("devaccess run --camera -- true") }
        defer { finish() }
        // The runs' working directory: the bench user must be able to enter it.
        guard chdir("/") == 0 else { fail("chdir /: \(errnoText())") }
        let (node, environment) = declareCameraAllowed()
        let daemonProcess = startDaemon(environment: environment, extra: ["--max-changes-per-user", "1000000"])
        guard honoursTestDevices() else { return skipNoTestHook("devaccess run --camera -- true") }
        let cli = here.appendingPathComponent("devaccess").path
        let user = ["/usr/bin/setpriv", "--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--init-groups", "--"]
        let run = [cli, "run", "--socket", work + "/broker.sock", "--camera", "--"]

        // The run really gets the camera, and the same user without it does not: what is
        // measured is a run with access, not a refusal.
        let open = ["/bin/sh", "-c", "exec 3<>\"$1\"", "sh", node]
        guard !spawn(user[0], Array(user.dropFirst()) + open, environment: environment) else {
            fail("uid \(Self.uid) opens \(node) without a run: the comparison would be meaningless")
        }
        guard spawn(user[0], Array(user.dropFirst()) + run + open, environment: environment) else {
            fail("'devaccess run --camera' could not open \(node) as uid \(Self.uid); see \(work)/daemon.log")
        }
        let starters = [
            Starter(label: "plain exec (setpriv + /bin/true)", program: user[0], arguments: Array(user.dropFirst()) + ["/bin/true"]),
            Starter(label: "devaccess --version (CLI start)", program: user[0],
                    arguments: Array(user.dropFirst()) + [cli, "--version"]),
            Starter(label: "devaccess run --camera -- true", program: user[0],
                    arguments: Array(user.dropFirst()) + run + ["/bin/true"]),
        ]
        let others = otherStarters(user: user, environment: environment)
        let measured = sample(starters + others.starters, samples: samples, environment: environment)
        // Every run ended and took its entry with it.
        usleep(200_000)
        let left = aclLine(node)
        if left.split(separator: " ").contains(where: { $0.hasPrefix("group:20") }) {
            fail("a run's entry stayed on \(node): \(left)")
        }
        kill(daemonProcess.processIdentifier, SIGTERM)
        daemonProcess.waitUntilExit()
        reportStarts(measured, samples: samples)
        for note in others.notes { report.skip(note.name, note.why) }
    }

    /// The declared camera node and the environment of a daemon whose policy allows the
    /// camera by default.
    func declareCameraAllowed() -> (node: String, environment: [String: String]) {
        var (_, node, environment) = declareCamera(id: "camera:bench-run")
        let config = work + "/config"
        guard mkdir(config, 0o755) == 0 || errno == EEXIST else { fail("mkdir \(config): \(errnoText())") }
        do {
            try "[camera]\nDefault=allow\n".write(toFile: config + "/devaccess.conf", atomically: true, encoding: .utf8)
        } catch {
            fail("cannot write the policy: \(error)")
        }
        environment["DEVACCESS_CONFIG_DIR"] = config
        return (node, environment)
    }

    /// bwrap and systemd-run where they work here; why not, for those that do not.
    func otherStarters(user: [String], environment: [String: String])
        -> (starters: [Starter], notes: [(name: String, why: String)]) {
        var starters: [Starter] = []
        var notes: [(name: String, why: String)] = []
        let bwraps: [String] = ["/usr/bin/bwrap", "/bin/bwrap"]
        if let bwrap = bwraps.first(where: { access($0, X_OK) == 0 }) {
            let arguments = Array(user.dropFirst()) + [bwrap, "--dev-bind", "/", "/", "/bin/true"]
            if spawn(user[0], arguments, environment: environment) {
                starters.append(Starter(label: "bwrap --dev-bind / / true", program: user[0], arguments: arguments))
            } else {
                notes.append(("bwrap --dev-bind / / true", "installed but fails as uid \(Self.uid) here (user namespaces?)"))
            }
        } else {
            notes.append(("bwrap --dev-bind / / true", "bubblewrap is not installed (apt install bubblewrap)"))
        }
        if access("/run/systemd/system", F_OK) == 0, access("/usr/bin/systemd-run", X_OK) == 0 {
            let arguments = ["--quiet", "--pipe", "--wait", "/bin/true"]
            if spawn("/usr/bin/systemd-run", arguments) {
                starters.append(Starter(label: "systemd-run --pipe --wait true (root)", program: "/usr/bin/systemd-run",
                                        arguments: arguments))
            } else {
                notes.append(("systemd-run --pipe --wait true", "fails here"))
            }
        } else {
            notes.append(("systemd-run --pipe --wait true", "systemd is not the service manager here (no /run/systemd/system)"))
        }
        return (starters, notes)
    }

    /// Warm caches, then interleave the starters so load on the shared machine falls on all.
    func sample(_ starters: [Starter], samples: Int, environment: [String: String]) -> [Starter] {
        for starter in starters {
            for _ in 0..<10 {
                guard spawn(starter.program, starter.arguments, environment: environment) else {
                    fail("\(starter.label) failed")
                }
            }
        }
        var starters = starters
        for _ in 0..<samples {
            for index in starters.indices {
                let start = now()
                guard spawn(starters[index].program, starters[index].arguments, environment: environment) else {
                    fail("\(starters[index].label) failed; see \(work)/daemon.log")
                }
                starters[index].samples.append(now() - start)
            }
        }
        return starters
    }

    /// Each starter's p50 against plain exec's (the first), then where devaccessd's part
    /// goes: its engine passes per run (ledger writes with fsync, the nodes' ACLs), by
    /// trigger, as it logs them.
    func reportStarts(_ starters: [Starter], samples: Int) {
        func ms(_ sorted: [UInt64], _ p: Double) -> Double { percentile(sorted, p) / 1000 }
        let anchor = starters[0].samples.sorted()
        let anchorName = starters[0].label + " p50"
        for (index, starter) in starters.enumerated() where index > 0 {
            let sorted = starter.samples.sorted()
            report.add(starter.label + " p50 (\(samples) starts, as uid \(Self.uid))", ms(sorted, 0.5), "ms",
                       anchor: anchorName, ms(anchor, 0.5),
                       goal: index == 2 ? .excessBelow(10, "< 10 ms over plain exec") : nil,
                       note: String(format: "p90 %.2f ms (plain exec p90 %.2f ms)", ms(sorted, 0.9), ms(anchor, 0.9)))
        }
        let passes = engineDurations(work + "/daemon.log")
        let runCount = Double(starters[2].samples.count + 11)
        for trigger in passes.keys.sorted() {
            let values = passes[trigger] ?? []
            report.add("devaccessd engine pass '\(trigger)' p50", values[values.count / 2], "ms",
                       note: String(format: "%.1f passes per run", Double(values.count) / runCount))
        }
    }

    /// `duration_ms` of the daemon's `enforcement run` lines for runs, by trigger, sorted.
    func engineDurations(_ log: String) -> [String: [Double]] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [:] }
        var result: [String: [Double]] = [:]
        for line in text.split(separator: "\n") where line.contains("msg=\"enforcement run\"") {
            let fields = line.split(separator: " ")
            guard let trigger = fields.first(where: { $0.hasPrefix("trigger=") })?.dropFirst("trigger=".count),
                  ["run", "run-end", "process-exit"].contains(String(trigger)),
                  let duration = fields.first(where: { $0.hasPrefix("duration_ms=") })
                    .flatMap({ Double($0.dropFirst("duration_ms=".count)) }) else { continue }
            result[String(trigger), default: []].append(duration)
        }
        return result.mapValues { $0.sorted() }
    }

    /// The file system the ledger is on (`stat -f`), outside the timed part.
    func fileSystem(_ path: String) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/stat")
        process.arguments = ["-f", "-c", "%T", path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return "?" }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
