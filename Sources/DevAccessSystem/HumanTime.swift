import FoundationEssentials
import Glibc

/// Times as people read them in text output: local time and, for an end, the time left
/// ("until 18:00 CET, 1h58m left"). The one formatter for that: status, list, pending,
/// request results and the consent prompt all use it. Machine formats (JSON, CSV) keep
/// UTC ISO 8601 (ISOTime) and never come here.
public struct HumanTime: Sendable {
    /// Turns an instant into local calendar fields and the zone's abbreviation.
    public struct Zone: Sendable {
        let fields: @Sendable (time_t) -> (fields: tm, abbreviation: String)?

        /// The process's zone (TZ, else /etc/localtime), through localtime_r.
        public static let local = Zone { seconds in
            var time = seconds
            var fields = tm()
            guard localtime_r(&time, &fields) != nil else { return nil }
            let abbreviation = fields.tm_zone.map { String(cString: $0) } ?? ""
            return (fields, abbreviation)
        }

        /// A zone at a fixed offset from UTC (tests, and UTC itself).
        public static func fixed(offsetSeconds: Int, abbreviation: String) -> Zone {
            Zone { seconds in
                var time = seconds + time_t(offsetSeconds)
                var fields = tm()
                guard gmtime_r(&time, &fields) != nil else { return nil }
                return (fields, abbreviation)
            }
        }
    }

    /// Seconds since 1970 (UTC) of "now", which "left" and "today" are measured from.
    public var now: Double
    public var zone: Zone

    public init(now: Double, zone: Zone = .local) {
        self.now = now
        self.zone = zone
    }

    /// "18:00 CET, 1h58m left"; "Wed 2 Dec 18:00 CET, 1d13h left" on another day; "18:00
    /// CET, ended 5m ago" once past.
    public func end(_ seconds: Double) -> String {
        let left = Int64((seconds - now).rounded(.down))
        let when = moment(seconds)
        return left > 0 ? "\(when), \(Self.span(left)) left" : "\(when), ended \(Self.span(-left)) ago"
    }

    /// "18:00 CET" today, "Wed 2 Dec 18:00 CET" this year, "2 Dec 2027 18:00 CET" otherwise.
    public func moment(_ seconds: Double) -> String {
        let instant = time_t(seconds.rounded(.down))
        guard let local = zone.fields(instant), let today = zone.fields(time_t(now.rounded(.down))) else {
            return String(Int64(seconds.rounded(.down)))  // outside what the C library converts
        }
        let clock = Self.two(local.fields.tm_hour) + ":" + Self.two(local.fields.tm_min)
            + (local.abbreviation.isEmpty ? "" : " " + local.abbreviation)
        let (day, month, year) = (local.fields.tm_mday, local.fields.tm_mon, local.fields.tm_year)
        if year == today.fields.tm_year && month == today.fields.tm_mon && day == today.fields.tm_mday {
            return clock
        }
        let monthName = Self.months[Int(month) % 12]
        if year == today.fields.tm_year {
            return "\(Self.weekdays[Int(local.fields.tm_wday) % 7]) \(day) \(monthName) \(clock)"
        }
        return "\(day) \(monthName) \(year + 1900) \(clock)"
    }

    /// The two largest units of a span: "1h58m", "2d3h", "12m30s", "45s".
    public static func span(_ seconds: Int64) -> String {
        guard seconds > 0 else { return "0s" }
        var rest = seconds
        var parts: [String] = []
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size || !parts.isEmpty {
            if parts.count == 2 { break }
            let count = rest / size
            rest %= size
            if count > 0 || !parts.isEmpty { parts.append("\(count)\(unit)") }
        }
        // "1h0m" reads worse than "1h".
        if parts.count == 2, parts[1].hasPrefix("0") { parts.removeLast() }
        return parts.joined()
    }

    /// Text written for machines and people alike (a status reason, a broker's message)
    /// with its UTC ISO 8601 times (ISOTime's `2026-12-01T18:00:00Z`) told in local time:
    /// an end ("until T") with the time left, any other time as the moment. `ends: false`
    /// for what has ended already (a revoked grant): its "until" is a moment, nothing is left.
    public func rewritingISOTimes(in text: String, ends: Bool = true) -> String {
        let bytes = Array(text.utf8)
        var result: [UInt8] = []
        var index = 0
        let until = Array("until ".utf8)
        while index < bytes.count {
            if let seconds = Self.isoUTC(bytes, at: index) {
                let isEnd = ends && result.count >= until.count && Array(result.suffix(until.count)) == until
                result += Array((isEnd ? end(seconds) : moment(seconds)).utf8)
                index += Self.isoLength
            } else {
                result.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// The length of `YYYY-MM-DDTHH:MM:SSZ`, the form ISOTime writes.
    static let isoLength = 20

    /// The time ISOTime wrote at `start`, read back by ISOTime; only windows of its exact
    /// shape are offered to it, so "until 2026-12-01T18:00Z" typed by a person stays as is.
    static func isoUTC(_ bytes: [UInt8], at start: Int) -> Double? {
        guard start + isoLength <= bytes.count else { return nil }
        let window = bytes[start..<start + isoLength]
        let separators: [Int: UInt8] = [4: 0x2D, 7: 0x2D, 10: 0x54, 13: 0x3A, 16: 0x3A, 19: 0x5A]
        for (offset, byte) in window.enumerated() {
            if let separator = separators[offset] {
                guard byte == separator else { return nil }
            } else if !(0x30...0x39).contains(byte) {
                return nil
            }
        }
        return ISOTime.parse(String(decoding: window, as: UTF8.self))?.timeIntervalSince1970
    }

    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]

    static func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
}
