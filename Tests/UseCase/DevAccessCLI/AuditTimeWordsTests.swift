import Foundation
import Testing
@testable import DevAccessCLI

/// `--since`/`--until` words resolve to what a calendar in the local zone says.
struct AuditTimeWordsTests {
    @Test func wordsDurationsAndDates() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone.current
        calendar.firstWeekday = 2  // Monday, as ISO 8601
        let now = Date(timeIntervalSince1970: 1_796_055_800.5)  // a Monday afternoon, 2026-11-30 (UTC)
        let today = calendar.startOfDay(for: now)
        #expect(AuditTimeWords.resolve("now", now: now) == now)
        #expect(AuditTimeWords.resolve("recent", now: now) == now.addingTimeInterval(-600))
        #expect(AuditTimeWords.resolve("today", now: now) == today)
        #expect(AuditTimeWords.resolve("Yesterday", now: now) == calendar.date(byAdding: .day, value: -1, to: today))
        #expect(AuditTimeWords.resolve("this-week", now: now) == calendar.dateInterval(of: .weekOfYear, for: now)?.start)
        #expect(AuditTimeWords.resolve("this-month", now: now) == calendar.dateInterval(of: .month, for: now)?.start)
        #expect(AuditTimeWords.resolve("7d", now: now) == now.addingTimeInterval(-7 * 86_400))
        #expect(AuditTimeWords.resolve("1h30m", now: now) == now.addingTimeInterval(-5400))
        #expect(AuditTimeWords.resolve("2026-11-01T10:00:00Z", now: now) == Date(timeIntervalSince1970: 1_793_527_200))
        let date = try #require(AuditTimeWords.resolve("2026-11-01", now: now))
        #expect(calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
            == DateComponents(year: 2026, month: 11, day: 1, hour: 0, minute: 0))
        let boot = try #require(AuditTimeWords.resolve("boot", now: Date()))
        let uptime = try String(contentsOfFile: "/proc/uptime", encoding: .utf8).split(separator: " ").first
            .flatMap { Double($0) } ?? -1
        #expect(abs(Date().timeIntervalSince(boot) - uptime) < 5, "boot \(boot), uptime \(uptime)")
        for bad in ["", "last tuesday", "2026-13-01", "7", "tomorrow", "2026-11-31"] {
            #expect(AuditTimeWords.resolve(bad, now: now) == nil, "\(bad)")
        }
    }
}
