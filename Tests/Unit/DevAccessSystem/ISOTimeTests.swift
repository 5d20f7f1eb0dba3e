import FoundationEssentials
import Glibc
import Testing
import DevAccessSystem

/// The one ISO 8601 reader and writer: what admins type, what devaccessd and gpsd write.
@Suite struct ISOTimeTests {
    @Test func writesUTCWholeSeconds() {
        #expect(ISOTime.format(Date(timeIntervalSince1970: 1_764_583_200.75)) == "2025-12-01T10:00:00Z")
        #expect(ISOTime.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
    }

    @Test func readsZonesFractionsAndWhatItWrites() throws {
        let expected = Date(timeIntervalSince1970: 1_764_583_200)
        #expect(ISOTime.parse("2025-12-01T10:00:00Z") == expected)
        #expect(ISOTime.parse("2025-12-01T10:00Z") == expected)
        #expect(ISOTime.parse("2025-12-01T11:00+01:00") == expected)
        #expect(ISOTime.parse("2025-12-01T0500-0500") == nil, "hours and minutes need their colon")
        #expect(ISOTime.parse("2025-12-01T05:00-0500") == expected)
        // gpsd writes milliseconds.
        let gpsd = try #require(ISOTime.parse("2025-12-01T10:00:00.250Z"))
        #expect(abs(gpsd.timeIntervalSince1970 - 1_764_583_200.25) < 0.000_001)
        for date in [Date(timeIntervalSince1970: 1), Date(timeIntervalSince1970: 4_102_444_799)] {
            #expect(ISOTime.parse(ISOTime.format(date)) == date)
        }
    }

    @Test func refusesWhatIsNotATime() {
        for text in ["", "tomorrow", "2025-12-01", "2025-02-30T10:00Z", "2025-13-01T10:00Z", "2025-12-01T24:00Z",
                     "2025-12-01T10:60Z", "2025-12-01T10:00:00Zjunk", "2025-12-01T10:00:00.Z",
                     "2025-12-01T10:00:00.1234567890Z", "1969-12-31T23:59Z", "2025-12-01T10:00+24:00"] {
            #expect(ISOTime.parse(text) == nil, "\(text)")
        }
    }

    @Test func noZoneMeansTheLocalZone() throws {
        let saved = getenv("TZ").map { String(cString: $0) }
        defer {
            if let saved { setenv("TZ", saved, 1) } else { unsetenv("TZ") }
            tzset()
        }
        setenv("TZ", "UTC+05", 1)  // POSIX: five hours west of UTC
        tzset()
        #expect(ISOTime.parse("2025-12-01T05:00") == Date(timeIntervalSince1970: 1_764_583_200))
    }
}
