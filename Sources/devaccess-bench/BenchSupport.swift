import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
import Foundation
import Glibc

struct BenchArguments {
    var events = 100_000
    var batch = 10_000
    var devices = 10
    var rounds = 5
    /// Program launches per method (devaccess run's launcher, posix_spawn, Foundation).
    var launches = 200
    /// Where the scratch directory goes: the file system the ledger will live on matters.
    var directory = "/var/tmp"
    /// Where to keep a copy of the benchmark's ledger (before the archive step), to profile
    /// reports on it afterwards.
    var keepLedger: String?

    static func parse(_ words: [String]) -> BenchArguments {
        var result = BenchArguments()
        var index = 0
        while index < words.count {
            let word = words[index]
            let value = index + 1 < words.count ? Int(words[index + 1]) : nil
            if word == "--dir", index + 1 < words.count {
                result.directory = words[index + 1]
                index += 2
                continue
            }
            if word == "--keep-ledger", index + 1 < words.count {
                result.keepLedger = words[index + 1]
                index += 2
                continue
            }
            switch (word, value) {
            case ("--events", let number?) where number > 0: result.events = number
            case ("--batch", let number?) where number > 0: result.batch = number
            case ("--devices", let number?) where number > 0 && number <= 1000: result.devices = number
            case ("--rounds", let number?) where number > 0 && number <= 100: result.rounds = number
            case ("--launches", let number?) where number > 0 && number <= 100_000: result.launches = number
            default:
                FileHandle.standardError.write(Data("""
                    usage: devaccess-bench [--events N (100000)] [--batch N (10000)] [--devices N (10)] [--rounds N (5)] [--launches N (200)] [--dir DIR (/var/tmp)] [--keep-ledger FILE]
                    unexpected '\(word)'\n
                    """.utf8))
                exit(64)
            }
            index += 2
        }
        return result
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
        guard mkdtemp(&template) != nil else { fatalError("mkdtemp: \(String(cString: strerror(errno)))") }
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
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
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

    /// Seconds for `sqlite3` to insert `rows` rows of the audit table's shape from an SQL
    /// script in one transaction, WAL and synchronous=FULL like the ledger.
    static func insert(rows: Int, in directory: String) -> Double? {
        guard FileManager.default.isExecutableFile(atPath: program) else {
            print("sqlite3 CLI:    not installed (apt install sqlite3); no ratio")
            return nil
        }
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
