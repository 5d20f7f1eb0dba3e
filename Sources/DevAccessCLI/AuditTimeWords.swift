import DevAccessSystem
import DevAccessCore
import FoundationEssentials
import Glibc

/// `--since`/`--until` of audit reports, as aureport takes them: `now`, `recent` (10 minutes
/// ago), `today`, `yesterday`, `this-week` (Monday), `this-month`, `boot`, a duration back from
/// now (`7d`, the same parser as `--for`), or an ISO 8601 date-time or date (as `--until`;
/// no zone = local time). Words are resolved here, in the admin's time zone.
enum AuditTimeWords {
    static let help = "now, recent (10 min), today, yesterday, this-week, this-month, boot, a duration back "
        + "(7d, 12h), or ISO 8601 (2026-11-30, 2026-11-30T08:00, ...Z)"

    static func resolve(_ text: String, now: Date) -> Date? {
        switch text.lowercased() {
        case "now": return now
        case "recent": return now.addingTimeInterval(-600)
        case "today": return startOfDay(now, daysBack: 0)
        case "yesterday": return startOfDay(now, daysBack: 1)
        case "this-week":
            guard let local = localParts(now) else { return nil }
            // tm_wday: 0 Sunday ... 6 Saturday; weeks start on Monday (ISO 8601).
            return startOfDay(now, daysBack: Int((local.tm_wday + 6) % 7))
        case "this-month":
            guard let local = localParts(now) else { return nil }
            return startOfDay(now, daysBack: Int(local.tm_mday) - 1)
        case "boot": return bootTime()
        default: break
        }
        if let seconds = try? DurationText.seconds(text) { return now.addingTimeInterval(-TimeInterval(seconds)) }
        if let time = ISOTime.parse(text) { return time }
        // A date alone: its start, local time.
        if text.utf8.count == 10, let time = ISOTime.parse(text + "T00:00") { return time }
        return nil
    }

    private static func localParts(_ date: Date) -> tm? {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        return localtime_r(&seconds, &parts) == nil ? nil : parts
    }

    /// Local midnight, `daysBack` days before `date`'s (through mktime, so DST days are right).
    private static func startOfDay(_ date: Date, daysBack: Int) -> Date? {
        guard var parts = localParts(date) else { return nil }
        parts.tm_mday -= Int32(daysBack)
        parts.tm_hour = 0
        parts.tm_min = 0
        parts.tm_sec = 0
        parts.tm_isdst = -1
        let seconds = mktime(&parts)
        return seconds == -1 ? nil : Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The kernel's boot time (`btime` in /proc/stat).
    static func bootTime() -> Date? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        for line in stat.split(separator: "\n") where line.hasPrefix("btime ") {
            if let seconds = TimeInterval(line.dropFirst(6).trimmingWhitespace()) {
                return Date(timeIntervalSince1970: seconds)
            }
        }
        return nil
    }

    /// Local time for tables: `2026-11-30 16:17:03`.
    static func local(microseconds: Int64) -> String {
        var seconds = time_t(microseconds / 1_000_000)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return String(microseconds) }
        func pad(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        return "\(parts.tm_year + 1900)-\(pad(parts.tm_mon + 1))-\(pad(parts.tm_mday)) "
            + "\(pad(parts.tm_hour)):\(pad(parts.tm_min)):\(pad(parts.tm_sec))"
    }
}
