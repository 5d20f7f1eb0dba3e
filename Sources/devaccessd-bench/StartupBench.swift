import Foundation
import Glibc

/// `--startup`: how long a command takes from exec to exit, against `/bin/true` (the exec
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
        let cases: [(String, String, [String])] = [
            ("/bin/true (exec floor)", "/bin/true", []),
            ("devaccess --version", devaccess, ["--version"]),
            ("devaccess status", devaccess, ["status"]),
            ("devaccessd --version", daemon, ["--version"]),
        ]
        var times = [[UInt64]](repeating: [], count: cases.count)
        for round in 0..<(samples + 10) {
            for (index, entry) in cases.enumerated() {
                let start = now()
                guard spawn(entry.1, entry.2) else { fail("\(entry.0) failed") }
                if round >= 10 { times[index].append(now() - start) }  // 10 warm-up rounds
            }
        }
        print("start-up, \(samples) starts each, interleaved; load average \(loadAverage())")
        let floor = percentile(times[0].sorted(), 0.5)
        for (index, entry) in cases.enumerated() {
            let sorted = times[index].sorted()
            let p50 = percentile(sorted, 0.5), p10 = percentile(sorted, 0.1), p90 = percentile(sorted, 0.9)
            print("  " + entry.0.padding(toLength: 28, withPad: " ", startingAt: 0)
                  + String(format: " p10 %6.2f ms  p50 %6.2f ms  p90 %6.2f ms  (p50 %5.1fx the exec floor)",
                           p10 / 1000, p50 / 1000, p90 / 1000, p50 / max(floor, 1)))
        }
        for path in [devaccess, daemon] {
            let stripped = NSTemporaryDirectory() + "devaccessd-bench-stripped"
            defer { unlink(stripped) }
            let size = spawn("/usr/bin/strip", ["-o", stripped, path]) ? Self.size(stripped) : -1
            print(String(format: "  %@: %.1f MB, %.1f MB stripped", path as NSString,
                         Double(Self.size(path)) / 1_048_576, Double(size) / 1_048_576))
        }
    }

    static func size(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : -1
    }

    func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
            .joined(separator: " ") ?? "?"
    }
}
