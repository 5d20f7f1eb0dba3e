import Foundation
import Glibc

/// `startup`: how long a command takes from exec to exit, against `/bin/true` (the exec
/// floor) in the same run, interleaved so load affects each alike; and the executables'
/// sizes, stripped (issue 17's goals: `--version` <= 3 ms, each <= 20 MB).
struct StartupBench {
    let directory: String
    /// The bench's one posix_spawn-and-wait (HotplugBench.spawn), used by every mode.
    private func spawn(_ program: String, _ arguments: [String]) -> Bool {
        HotplugBench().spawn(program, arguments)
    }

    func run(samples: Int) {
        let devaccess = directory + "/devaccess", daemon = directory + "/devaccessd"
        var cases: [(String, String, [String])] = [
            ("/bin/true (exec floor)", "/bin/true", []),
            ("devaccess --version", devaccess, ["--version"]),
            ("devaccess status", devaccess, ["status"]),
            ("devaccessd --version", daemon, ["--version"]),
        ]
        // What `status` replaces on a desktop: listing the cameras and the sound cards with
        // the standard tools (they exit 1 when there is nothing to list; the time counts).
        let tools = [("v4l2-ctl --list-devices", "/usr/bin/v4l2-ctl", ["--list-devices"]),
                     ("arecord -l", "/usr/bin/arecord", ["-l"])]
        let haveTools = tools.allSatisfy { access($0.1, X_OK) == 0 }
        if haveTools { cases += tools }
        var times = [[UInt64]](repeating: [], count: cases.count)
        for round in 0..<(samples + 10) {
            for (index, entry) in cases.enumerated() {
                let start = now()
                guard spawn(entry.1, entry.2) || index >= 4 else { fail("\(entry.0) failed") }
                if round >= 10 { times[index].append(now() - start) }  // 10 warm-up rounds
            }
        }
        let p50s = times.map { percentile($0.sorted(), 0.5) / 1000 }
        let floorName = "/bin/true p50 (exec floor)"
        for index in 1..<4 {
            let sorted = times[index].sorted()
            report.add(cases[index].0 + " p50 (\(samples) starts, interleaved)", p50s[index], "ms",
                       anchor: floorName, p50s[0], goal: index == 1 ? .below(3, "<= 3 ms") : nil,
                       note: String(format: "p10 %.2f ms, p90 %.2f ms", percentile(sorted, 0.1) / 1000,
                                    percentile(sorted, 0.9) / 1000))
        }
        let statusGoal = BenchGoal.ratioBelow(1, "<= v4l2-ctl + arecord")
        if haveTools {
            report.add("devaccess status p50", p50s[2], "ms", anchor: "v4l2-ctl --list-devices + arecord -l, p50s",
                       p50s[4] + p50s[5], goal: statusGoal,
                       note: "no camera or sound card on a machine without them: both tools find nothing")
        } else {
            report.skip("devaccess status against v4l2-ctl --list-devices + arecord -l",
                        "v4l2-ctl or arecord is not installed (apt install v4l-utils alsa-utils)", goal: statusGoal)
        }
        for path in [devaccess, daemon] {
            let stripped = NSTemporaryDirectory() + "devaccess-bench-stripped"
            defer { unlink(stripped) }
            let name = URL(fileURLWithPath: path).lastPathComponent + " stripped size"
            guard spawn("/usr/bin/strip", ["-o", stripped, path]) else {
                report.skip(name, "strip failed (apt install binutils)")
                continue
            }
            report.add(name, Double(Self.size(stripped)) / 1_048_576, "MB", goal: .below(20, "<= 20 MB"),
                       note: String(format: "%.1f MB unstripped", Double(Self.size(path)) / 1_048_576))
        }
    }

    static func size(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : -1
    }
}
