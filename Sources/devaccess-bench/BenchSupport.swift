import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation
import Glibc
import DevAccessSystem

/// The sections, in the order `all` runs them, and the quick set run when none is named.
enum Section: String, CaseIterable {
    case startup, status, ledger, audit, grant, launch, hotplug, operations, run, location

    static let quick: [Section] = [.startup, .status, .ledger, .audit, .grant, .launch, .hotplug, .operations, .run]

    var summary: String {
        switch self {
        case .startup: return "devaccess/devaccessd start-up against /bin/true, status against v4l2-ctl + arecord; sizes"
        case .status: return "status round trips against a socket echo, req/s with many clients, daemon RSS"
        case .ledger: return "ledger appends, read-back, audit --verify against sqlite3"
        case .audit: return "audit --summary/--format/--archive over the ledger section's events, against sqlite3"
        case .grant: return "grant -> ACL through the engine against setfacl -m (root)"
        case .launch: return "devaccess run's launcher against posix_spawn and Foundation's Process (root)"
        case .hotplug: return "re-created node -> ACL entry by devaccessd against setfacl; expiry (root, test hook)"
        case .operations: return "grant/revoke through devaccessd against --offline and setfacl (root, test hook)"
        case .run: return "devaccess run --camera -- true against plain exec (root, test hook)"
        case .location: return "a fix from gpsd to 100 clients through devaccessd against gpsd's own (root, gpsd, gpsfake)"
        }
    }
}

/// The command line: section names, then options; a value not given takes the quick set's
/// default when no section is named, the full default otherwise.
struct BenchOptions {
    var sections: [Section] = []
    var json = false
    var quick = false
    // status
    var socket: String?
    var clients = [16, 200]
    var seconds = 3.0
    var sequential = 3000
    // startup, hotplug, operations, run
    var samples = 200
    var expiries = 10
    // location
    var watchers = 100
    var fixes = 60
    var direct: Int?
    // ledger, audit
    var events = 100_000
    var batch = 10_000
    /// Where the scratch directory goes: the file system the ledger will live on matters.
    var directory = "/var/tmp"
    /// Where to keep a copy of the benchmark's ledger (before the archive step), to profile
    /// reports on it afterwards.
    var keepLedger: String?
    // grant
    var devices = 10
    var rounds = 5
    /// Program launches per method (devaccess run's launcher, posix_spawn, Foundation).
    var launches = 200

    static let usage = """
        usage: devaccess-bench [SECTION...|all] [--json] [options]
        sections (none named: the quick set, \(Section.quick.map(\.rawValue).joined(separator: " "))):
        \(Section.allCases.map { "  " + $0.rawValue.padding(toLength: 11, withPad: " ", startingAt: 0) + $0.summary }
            .joined(separator: "\n"))
        options (full default, quick set's default):
          --json                 one JSON document instead of the table
          --samples N            startup, hotplug, operations, run (200, 100)
          --clients N,M          status: concurrent clients (16,200)    --seconds S   per load (3)
          --requests N           status: sequential round trips (3000)
          --socket PATH          status: a running devaccessd instead of one started for the run
          --expiries N           hotplug: timed grants (10, 3)
          --events N             ledger, audit (100000, 50000)          --batch N     (10000)
          --dir DIR              ledger scratch directory (/var/tmp)     --keep-ledger FILE
          --devices N            grant (10)    --rounds N   grant (5)    --launches N   launch (200, 100)
          --watchers N           location (100)    --direct N (63)    --fixes N (60)
        """

    static func parse(_ words: [String]) -> BenchOptions {
        var result = BenchOptions()
        var given = Set<String>()
        var index = 0
        func next() -> String {
            index += 1
            guard index < words.count else { usageError("missing value for \(words[index - 1])") }
            given.insert(words[index - 1])
            return words[index]
        }
        func number(_ range: ClosedRange<Int>) -> Int {
            let word = next()
            guard let value = Int(word), range.contains(value) else {
                usageError("\(words[index - 1]) takes a whole number in \(range.lowerBound)...\(range.upperBound), not '\(word)'")
            }
            return value
        }
        while index < words.count {
            let word = words[index]
            switch word {
            case "all": result.sections = Section.allCases
            case "--json": result.json = true
            case "--socket": result.socket = next()
            case "--clients":
                let text = next()
                result.clients = text.split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
                if result.clients.isEmpty { usageError("--clients takes counts like 16,200, not '\(text)'") }
            case "--seconds":
                let text = next()
                guard let value = Double(text), value > 0, value <= 600 else { usageError("--seconds takes 0-600, not '\(text)'") }
                result.seconds = value
            case "--requests": result.sequential = number(1...10_000_000)
            case "--samples": result.samples = number(1...100_000)
            case "--expiries": result.expiries = number(0...1000)
            case "--watchers": result.watchers = number(1...10_000)
            case "--fixes": result.fixes = number(1...100_000)
            case "--direct": result.direct = number(1...10_000)
            case "--events": result.events = number(1...100_000_000)
            case "--batch": result.batch = number(1...100_000_000)
            case "--dir": result.directory = next()
            case "--keep-ledger": result.keepLedger = next()
            case "--devices": result.devices = number(1...1000)
            case "--rounds": result.rounds = number(1...100)
            case "--launches": result.launches = number(1...100_000)
            case "-h", "--help":
                print(usage)
                exit(0)
            default:
                guard let section = Section(rawValue: word) else { usageError("unexpected '\(word)'") }
                if !result.sections.contains(section) { result.sections.append(section) }
            }
            index += 1
        }
        if result.sections.isEmpty {
            result.quick = true
            result.sections = Section.quick
            if !given.contains("--samples") { result.samples = 100 }
            if !given.contains("--expiries") { result.expiries = 3 }
            if !given.contains("--events") { result.events = 50_000 }
            if !given.contains("--launches") { result.launches = 100 }
        }
        return result
    }

    static func usageError(_ message: String) -> Never {
        FileHandle.standardError.write(Data("devaccess-bench: \(message)\n\(usage)\n".utf8))
        exit(64)
    }
}

enum Measure {
    /// Wall-clock seconds `body` takes.
    static func time(_ body: () -> Void) -> Double {
        let clock = ContinuousClock()
        let elapsed = clock.measure(body)
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static func seconds(_ value: Double) -> String { String(format: "%.3f s", value) }
    static func milliseconds(_ value: Double) -> String { String(format: "%.2f ms", value * 1000) }
    static func rate(_ value: Double) -> String { String(format: "%.0f", value) }
    static func ratio(_ value: Double) -> String { String(format: "%.2f", value) }
}

enum Scratch {
    static func make(in directory: String) -> String {
        var template = Array("\(directory)/devaccess-bench-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { fail("\(SystemCallError.current("mkdtemp", path: directory))") }
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        chmod(path, 0o755)
        return path
    }

    static func remove(_ path: String) { try? FileManager.default.removeItem(atPath: path) }

    static func fileSystem(_ path: String) -> String {
        Shell.output("/usr/bin/stat", ["-f", "-c", "%T", path])?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
    }
}

enum Shell {
    /// Runs a program with posix_spawn (Foundation's Process adds tens of milliseconds per
    /// start here, which would be charged to the tool being compared); stdout and stderr go
    /// to /dev/null, stdin comes from `stdin` when given. True when it exited 0.
    @discardableResult
    static func run(_ program: String, _ arguments: [String], stdin: String? = nil) -> Bool {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdin ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid = pid_t()
        guard posix_spawn(&pid, program, &actions, nil, argv, environ) == 0 else { return false }
        var status: Int32 = 0
        _ = valueOrErrno { waitpid(pid, &status, 0) }
        // WIFEXITED && WEXITSTATUS == 0, spelled out (macros).
        return status & 0x7f == 0 && (status >> 8) & 0xff == 0
    }

    /// stdout of a short command, for facts printed in the header.
    static func output(_ program: String, _ arguments: [String]) -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil
    }
}

/// Events shaped like the ones the broker writes: names, ids, a node, a few details.
enum BenchEvents {
    static let actor = Principal(uid: 0, name: "root")
    static let subject = Principal(uid: 1000, name: "alice")

    /// A request, its allow (a grant, numbered as the broker numbers them), a request, and
    /// the revoke of that grant, in turn: the HTML report then draws the grants as bars
    /// (up to its cap), as it would on a real ledger.
    static func event(_ n: Int) -> AuditEvent {
        let type: AuditEventType
        var details = ["n": String(n)]
        switch n % 4 {
        case 1:
            type = .decision
            details.merge(["decision": "allow", "how": "consent", "scope": "until", "grant_id": String(n)]) { $1 }
        case 3:
            type = .revoke
            details["grant_id"] = String(n - 2)
        default:
            type = .request
        }
        return AuditEvent(type: type, time: Date(), actor: actor, subject: subject, permission: .camera,
                          deviceID: "camera:pci-0000:00:14.0-usb-0:1:1.0-video-index0", deviceName: "Integrated Camera",
                          program: "/usr/bin/cheese", nodePath: "/dev/video0", details: details)
    }
}

/// The standard tool: the sqlite3 command-line shell on the same file system.
enum SQLiteTool {
    static let program = "/usr/bin/sqlite3"
    static let missing = "/usr/bin/sqlite3 is not installed (apt install sqlite3)"

    /// Seconds for `sqlite3` to insert `rows` rows of the audit table's shape from an SQL
    /// script in one transaction, WAL and synchronous=FULL like the ledger.
    static func insert(rows: Int, in directory: String) -> Double? {
        guard FileManager.default.isExecutableFile(atPath: program) else { return nil }
        let script = directory + "/insert.sql"
        var text = """
            PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
            CREATE TABLE audit (seq INTEGER PRIMARY KEY, time_usec INTEGER, type TEXT, actor_uid INTEGER,
              actor_name TEXT, subject_uid INTEGER, subject_name TEXT, permission TEXT, device_id TEXT,
              device_name TEXT, program TEXT, node_path TEXT, details TEXT, prev_hash TEXT, hash TEXT);
            BEGIN;\n
            """
        let hash = String(repeating: "ab", count: 32)
        for n in 1...rows {
            text += "INSERT INTO audit VALUES (\(n), 1800000000000000, 'request', 0, 'root', 1000, 'alice', 'camera', "
                + "'camera:pci-0000:00:14.0-usb-0:1:1.0-video-index0', 'Integrated Camera', '/usr/bin/cheese', "
                + "'/dev/video0', '{\"how\":\"consent\",\"n\":\"\(n)\",\"scope\":\"until\"}', '\(hash)', '\(hash)');\n"
        }
        text += "COMMIT;\n"
        do {
            try text.write(toFile: script, atomically: false, encoding: .utf8)
        } catch {
            return nil
        }
        var ok = false
        let seconds = Measure.time { ok = Shell.run(program, [directory + "/sqlite3.db"], stdin: script) }
        return ok ? seconds : nil
    }

    static func select(in directory: String) -> Double? {
        guard FileManager.default.isExecutableFile(atPath: program) else { return nil }
        var ok = false
        let seconds = Measure.time {
            ok = Shell.run(program, [directory + "/sqlite3.db", "SELECT * FROM audit"])
        }
        return ok ? seconds : nil
    }
}
