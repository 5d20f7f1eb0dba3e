import Foundation
import Glibc

/// UTC times as ISO 8601 text (`2026-11-29T10:00:00Z`) for messages and JSON: whole
/// seconds, because a person reads them; the ledger keeps microseconds.
public enum ISOTime {
    public static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(date.timeIntervalSince1970) }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
            + "T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}
