import DevAccessSystem
import Testing

/// Local time and time left, from fixed clocks in fixed zones.
struct HumanTimeTests {
    /// 2026-12-01 16:02:00 UTC, a Tuesday.
    let now = 1_796_140_920.0
    let berlin = HumanTime.Zone.fixed(offsetSeconds: 3600, abbreviation: "CET")

    @Test func anEndTodayIsItsClockAndTheTimeLeft() {
        let time = HumanTime(now: now, zone: berlin)
        #expect(time.end(now + 2 * 3600 - 120 + 58) == "19:00 CET, 1h58m left")
        #expect(time.end(now + 30) == "17:02 CET, 30s left")
        #expect(time.end(now + 12 * 60 + 30) == "17:14 CET, 12m30s left")
        #expect(time.end(now + 3600) == "18:02 CET, 1h left", "no '0m'")
        #expect(time.end(now - 300) == "16:57 CET, ended 5m ago")
    }

    @Test func anotherDayNamesTheDayAndAnotherYearTheYear() {
        let time = HumanTime(now: now, zone: berlin)
        #expect(time.end(now + 86_400 + 3 * 3600) == "Wed 2 Dec 20:02 CET, 1d3h left")
        #expect(time.moment(now - 86_400) == "Mon 30 Nov 17:02 CET")
        #expect(time.moment(now + 40 * 86_400) == "10 Jan 2027 17:02 CET")
        // Midnight in Berlin is 23:00 UTC: the day is the local one.
        let lateUTC = HumanTime(now: 1_796_165_000, zone: berlin)  // 2026-12-01 22:43 UTC = 23:43 CET
        #expect(lateUTC.moment(1_796_165_000 + 1800) == "Wed 2 Dec 00:13 CET")
        let utc = HumanTime(now: 1_796_165_000, zone: .fixed(offsetSeconds: 0, abbreviation: "UTC"))
        #expect(utc.moment(1_796_165_000 + 1800) == "23:13 UTC")
    }

    @Test func theProcessZoneIsUsedByDefault() {
        // Whatever TZ the tests run in: the abbreviation localtime_r gives, never empty text.
        let text = HumanTime(now: now).end(now + 90)
        #expect(text.hasSuffix(", 1m30s left"), "\(text)")
    }

    @Test func isoTimesInTextAreToldLocally() {
        let time = HumanTime(now: now, zone: berlin)
        #expect(time.rewritingISOTimes(in: "grant 3 (until 2026-12-01T17:00:00Z; decided on 2026-12-01T15:00:00Z)")
                == "grant 3 (until 18:00 CET, 58m left; decided on 16:00 CET)")
        #expect(time.rewritingISOTimes(in: "allowed until 2026-12-02T09:30:00Z (grant 5, consent)")
                == "allowed until Wed 2 Dec 10:30 CET, 17h28m left (grant 5, consent)")
        // What has ended (a revoked grant) has no time left: its "until" is a moment.
        #expect(time.rewritingISOTimes(in: "grant 3: allow camera, until 2026-12-01T17:00:00Z", ends: false)
                == "grant 3: allow camera, until 18:00 CET")
        for untouched in ["no time here", "2026-12-01T17:00Z", "2026-12-01 17:00:00Z", "2026-13-01T17:00:0xZ", "until "] {
            #expect(time.rewritingISOTimes(in: untouched) == untouched)
        }
    }

    @Test func spans() {
        #expect(HumanTime.span(0) == "0s")
        #expect(HumanTime.span(59) == "59s")
        #expect(HumanTime.span(7080) == "1h58m")
        #expect(HumanTime.span(86_400 * 2 + 3600 * 3 + 59) == "2d3h")
        #expect(HumanTime.span(86_400) == "1d")
    }
}
