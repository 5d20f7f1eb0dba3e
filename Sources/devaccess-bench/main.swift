// devaccess-bench: every figure of devaccess's performance goals (issue 17), each against
// its anchor measured in the same run (a socket echo, /bin/true, setfacl, sqlite3,
// v4l2-ctl + arecord, posix_spawn, gpsd's own clients), as one table or one JSON document.
// Run by hand, in a release build, ideally as root:
//
//   swift build -c release --product devaccess-bench && sudo .build/release/devaccess-bench [SECTION...|all] [--json]
//
// No section named: the quick set (docs/performance.md). A section that cannot run here
// (not root, a tool missing, a release devaccessd without the test hook) gives a row
// "skipped: why", never a figure. Never a timed test: the figures depend on the machine.
import Foundation
import Glibc
import DevAccessLaunch

let options = BenchOptions.parse(Array(CommandLine.arguments.dropFirst()))
#if DEBUG
FileHandle.standardError.write(Data("devaccess-bench: a debug build; use 'swift build -c release' for representative figures\n".utf8))
#endif

var ledgerBench: LedgerBench?
let scratch = Scratch.make(in: options.directory)
report.removeOnFailure(scratch)
@MainActor func ledger() -> LedgerBench {
    if let ledgerBench { return ledgerBench }
    let made = LedgerBench(events: options.events, batch: options.batch, in: scratch)
    ledgerBench = made
    return made
}

/// The sections that run the devaccess and devaccessd next to this program.
let needsExecutables: Set<Section> = [.startup, .status, .hotplug, .operations, .run, .location]
let missingExecutables = ["devaccess", "devaccessd"].filter {
    access(benchDirectory.appendingPathComponent($0).path, X_OK) != 0
}

for section in options.sections {
    report.begin(section.rawValue)
    if needsExecutables.contains(section), !missingExecutables.isEmpty, options.socket == nil || section != .status {
        report.skip(section.rawValue, "no \(missingExecutables.joined(separator: " or ")) next to the bench in "
                    + "\(benchDirectory.path) (build them: make release)")
        continue
    }
    switch section {
    case .startup:
        StartupBench(directory: benchDirectory.path).run(samples: options.samples)
    case .status:
        statusSection(options)
    case .ledger:
        _ = ledger().fill(rows: true)
    case .audit:
        ledger().audit(keepLedger: options.keepLedger)
    case .grant:
        if getuid() == 0 {
            GrantBench.run(devices: options.devices, rounds: options.rounds, in: scratch)
        } else {
            report.skip("grant -> ACL entry against setfacl -m", "needs root (mknod and ACL edits)")
        }
    case .launch:
        if getuid() == 0 {
            LaunchBench.run(count: options.launches)
        } else {
            report.skip("ProgramLauncher against posix_spawn", "needs root (the launcher changes ids)")
        }
    case .hotplug:
        HotplugBench().run(samples: options.samples, expiries: options.expiries)
    case .operations:
        HotplugBench().operations(samples: options.samples)
    case .run:
        HotplugBench().runs(samples: options.samples)
    case .location:
        HotplugBench().location(watchers: options.watchers, direct: options.direct, fixes: options.fixes)
    }
}
Scratch.remove(scratch)
report.print()
