import FoundationEssentials
import Glibc

/// ISO 8601 times, one parser and one formatter for every module (libc's calendar, no ICU).
///
/// Written: UTC (`2026-11-29T10:00:00Z`) for messages and JSON, whole seconds, because a
/// person reads them; the ledger keeps microseconds.
///
/// Read: date-times as admins type them and as devaccessd writes them:
/// `YYYY-MM-DDTHH:MM[:SS[.fff]]` followed by `Z`, `±HH:MM`, `±HHMM`, or nothing for local
/// time. A date alone is refused: "until 2026-12-01" could mean the start or the end of that day.
public enum ISOTime {
    public static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(date.timeIntervalSince1970) }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
            + "T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    public static func parse(_ text: String) -> Date? {
        var scanner = Scanner(Array(text.utf8))
        guard let year = scanner.number(4), scanner.take("-"), let month = scanner.number(2), scanner.take("-"),
              let day = scanner.number(2), scanner.take("T") || scanner.take("t") || scanner.take(" "),
              let hour = scanner.number(2), scanner.take(":"), let minute = scanner.number(2) else { return nil }
        var second = 0
        var fraction = 0.0
        if scanner.take(":") {
            guard let value = scanner.number(2) else { return nil }
            second = value
            if scanner.take(".") || scanner.take(",") {
                guard let digits = scanner.digits(), !digits.isEmpty, digits.count <= 9 else { return nil }
                fraction = (Double(String(decoding: digits, as: UTF8.self)) ?? 0) / pow(10, Double(digits.count))
            }
        }
        guard (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour), (0...59).contains(minute),
              (0...59).contains(second), year >= 1970 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds: time_t
        if scanner.atEnd {
            parts.tm_isdst = -1
            var local = parts
            seconds = mktime(&local)
            // mktime normalises 31 February to 3 March: refuse dates that do not exist.
            guard seconds != -1, local.tm_mday == parts.tm_mday, local.tm_mon == parts.tm_mon else { return nil }
        } else {
            var offset = 0
            if !(scanner.take("Z") || scanner.take("z")) {
                let sign: Int
                if scanner.take("+") { sign = 1 } else if scanner.take("-") { sign = -1 } else { return nil }
                guard let hours = scanner.number(2) else { return nil }
                _ = scanner.take(":")
                guard let minutes = scanner.number(2), hours <= 23, minutes <= 59 else { return nil }
                offset = sign * (hours * 3600 + minutes * 60)
            }
            guard scanner.atEnd else { return nil }
            var utc = parts
            let base = timegm(&utc)
            guard base != -1, utc.tm_mday == parts.tm_mday, utc.tm_mon == parts.tm_mon else { return nil }
            seconds = base - time_t(offset)
        }
        return Date(timeIntervalSince1970: TimeInterval(seconds) + fraction)
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }

        mutating func take(_ character: Character) -> Bool {
            guard let ascii = character.asciiValue, index < bytes.count, bytes[index] == ascii else { return false }
            index += 1
            return true
        }

        /// Exactly `count` ASCII digits.
        mutating func number(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[index..<index + count] {
                guard (48...57).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            index += count
            return value
        }

        mutating func digits() -> ArraySlice<UInt8>? {
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
            return bytes[start..<index]
        }
    }
}
