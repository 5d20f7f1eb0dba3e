import Glibc
import DevAccessSystem
import DevAccessJournal

/// devaccessd's structured log: native journal entries when stderr is connected to
/// journald (`JOURNAL_STREAM` names stderr's device and inode), otherwise one logfmt
/// line per entry on stderr: `level=info msg="listening" socket=/run/devaccess/broker.sock`.
///
/// Journal entries carry `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER=devaccessd` and each
/// field as `DEVACCESS_<KEY>` (upper case). Safe to use from any thread: each entry is
/// one `write(2)` or one `sd_journal_sendv(3)`.
public final class BrokerLog: Sendable {
    /// syslog priorities.
    public enum Level: Int32, Sendable, Comparable, CaseIterable {
        case error = 3, warning = 4, notice = 5, info = 6, debug = 7

        public var name: String {
            switch self {
            case .error: return "error"
            case .warning: return "warning"
            case .notice: return "notice"
            case .info: return "info"
            case .debug: return "debug"
            }
        }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name }) else { return nil }
            self = level
        }

        /// More severe levels compare smaller, as in syslog.
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public enum Target: String, Sendable, CaseIterable {
        case journal, stderr
        /// Nothing is written (tests of the server in-process).
        case none
    }

    public let target: Target
    public let minimum: Level

    public init(target: Target, minimum: Level = .info) {
        self.target = target
        self.minimum = minimum
    }

    /// `journal` when stderr is the stream journald gave this process (`journalStream`:
    /// `JOURNAL_STREAM` as the process started with it), else `stderr`.
    public static func detectTarget(journalStream: String?) -> Target {
        guard let value = journalStream else { return .stderr }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return .stderr }
        var info = stat()
        guard fstat(STDERR_FILENO, &info) == 0 else { return .stderr }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode ? .journal : .stderr
    }

    public func isEnabled(_ level: Level) -> Bool { target != .none && level <= minimum }

    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        guard isEnabled(level) else { return }
        switch target {
        case .none: return
        case .stderr: writeLine(Self.logfmt(level, message, fields))
        case .journal: sendToJournal(level, message, fields)
        }
    }

    public func debug(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, message, fields) }
    public func notice(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.notice, message, fields) }
    public func warning(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, message, fields) }

    // MARK: logfmt

    static func logfmt(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String>) -> String {
        var line = "level=\(level.name) msg=\(quote(message))"
        for (key, value) in fields { line += " \(key)=\(quote(value))" }
        return line + "\n"
    }

    /// Bare when the value is a plain word; otherwise double-quoted with `"`, `\` and
    /// control characters escaped, so one entry is always one line.
    static func quote(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy {
            $0.value > 0x20 && $0.value != 0x7f && $0 != "\"" && $0 != "=" && $0 != "\\"
        }
        if plain { return value }
        var quoted = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case "\r": quoted += "\\r"
            case "\t": quoted += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7f {
                    quoted += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                        + String(scalar.value, radix: 16)
                } else {
                    quoted.unicodeScalars.append(scalar)
                }
            }
        }
        return quoted + "\""
    }

    private func writeLine(_ line: String) {
        FileDescriptor.writeAll(STDERR_FILENO, line)
    }

    // MARK: journal

    static func journalFields(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String>) -> [String] {
        var entries = ["MESSAGE=\(message)", "PRIORITY=\(level.rawValue)", "SYSLOG_IDENTIFIER=devaccessd"]
        for (key, value) in fields {
            let name = key.uppercased().map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined()
            entries.append("DEVACCESS_\(name)=\(value)")
        }
        return entries
    }

    private func sendToJournal(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String>) {
        Journal.send(Self.journalFields(level, message, fields))
    }
}
