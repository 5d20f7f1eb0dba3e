import Testing
import Foundation
import DevAccessCore
import DevAccessProtocol
@testable import DevAccessBroker
import DevAccessInterface

/// The gpsd-compatible endpoint's protocol, without sockets: what a client sends, what it
/// gets, at its level.
struct GpsdSessionTests {
    static let fix = LocationFix(device: "/dev/ttyACM0", mode: 3, time: "2026-11-30T12:00:00.000Z", latitude: 48.1173,
                                 longitude: 11.516666667, altitude: 545.4, speed: 1.2, track: 84.4, climb: 0.1,
                                 horizontalError: 3.1, verticalError: 5.2)
    static let sky = #"{"class":"SKY","device":"/dev/ttyACM0","satellites":[{"PRN":4,"el":47,"az":95,"used":true}]}"#
    static let snapshot = LocationSnapshot(generation: 1, release: "3.22", receivers: [.init(path: "/dev/ttyACM0",
        driver: "NMEA0183", activated: "2026-11-30T11:59:00.000Z")], fixes: [fix], sky: ["/dev/ttyACM0": sky])

    /// The reports a client gets for `commands`, decoded.
    static func exchange(_ commands: String, level: LocationAccuracy,
                         snapshot: LocationSnapshot = snapshot) throws -> [[String: JSONValue]] {
        var session = GpsdSession(level: level)
        var blur = LocationBlur()
        var allowance = Int.max
        let bytes = try session.receive(Array(commands.utf8), snapshot: snapshot, allowance: &allowance) {
            blur.serve($0, at: level)
        }
        return try reports(bytes)
    }

    static func reports(_ bytes: [UInt8]) throws -> [[String: JSONValue]] {
        try bytes.split(separator: UInt8(ascii: "\n")).map { line in
            guard case .object(let members) = try JSONParser.parse(line) else { throw SetupErrorText("not an object") }
            return Dictionary(members.map { ($0.key, $0.value) }, uniquingKeysWith: { $1 })
        }
    }

    struct SetupErrorText: Error { var text: String; init(_ text: String) { self.text = text } }

    static func number(_ report: [String: JSONValue], _ key: String) -> Double? {
        switch report[key] {
        case .number(let value)?: return value
        case .integer(let value)?: return Double(value)
        default: return nil
        }
    }

    @Test func gpspipeWatchGetsDevicesWatchAndTheFixAtTheLevel() throws {
        // What `gpspipe -w` sends.
        let reports = try Self.exchange(#"?WATCH={"enable":true,"json":true};"#, level: .city)
        #expect(reports.map { $0["class"] } == [.string("DEVICES"), .string("WATCH"), .string("TPV")])
        let tpv = reports[2]
        let latitude = try #require(Self.number(tpv, "lat"))
        #expect(latitude != 48.1173 && abs(latitude - 48.1173) < 0.1)
        #expect(tpv["speed"] == nil && tpv["track"] == nil && tpv["altMSL"] == nil && tpv["alt"] == nil)
        #expect(tpv["mode"] == .integer(2))
        #expect(Self.number(tpv, "eph") == 10_000)
    }

    @Test func exactGetsEverythingAndTheSky() throws {
        let reports = try Self.exchange("?WATCH={\"enable\":true}\n", level: .exact)
        #expect(reports.map { $0["class"] } == [.string("DEVICES"), .string("WATCH"), .string("TPV"), .string("SKY")])
        #expect(Self.number(reports[2], "lat") == 48.1173 && Self.number(reports[2], "speed") == 1.2)
        #expect(Self.number(reports[2], "altMSL") == 545.4)
    }

    @Test func skyGoesToExactOnly() throws {
        for level in LocationAccuracy.allCases where level != .exact {
            let reports = try Self.exchange(#"?WATCH={"enable":true};?POLL;"#, level: level)
            #expect(!reports.contains { $0["class"] == .string("SKY") })
            let poll = try #require(reports.last)
            #expect(poll["class"] == .string("POLL") && poll["sky"] == .array([]))
        }
    }

    @Test func nmeaAndRawWouldBypassTheLevelAndAreRefused() throws {
        for command in [#"?WATCH={"enable":true,"nmea":true};"#, #"?WATCH={"enable":true,"raw":2};"#] {
            let reports = try Self.exchange(command, level: .city)
            #expect(reports.count == 1 && reports[0]["class"] == .string("ERROR"))
        }
        let device = try Self.exchange(#"?DEVICE={"path":"/dev/ttyACM0","bps":4800};"#, level: .exact)
        #expect(device.count == 1 && device[0]["class"] == .string("ERROR"))
    }

    @Test func updatesGoToWatchersOnlyAndOncePerChange() {
        var session = GpsdSession(level: .street)
        var blur = LocationBlur()
        #expect(session.update(Self.snapshot) { blur.serve($0, at: .street) }.isEmpty)
        var allowance = 1
        _ = try? session.receive(Array(#"?WATCH={"enable":true};"#.utf8), snapshot: Self.snapshot, allowance: &allowance) {
            blur.serve($0, at: .street)
        }
        #expect(session.update(Self.snapshot) { blur.serve($0, at: .street) }.isEmpty)
        var next = Self.snapshot
        next.generation = 2
        #expect(!session.update(next) { blur.serve($0, at: .street) }.isEmpty)
        #expect(session.update(next) { blur.serve($0, at: .street) }.isEmpty)
    }

    @Test func anEndlessCommandIsCutOff() {
        var session = GpsdSession(level: .exact)
        #expect(throws: GpsdSession.TooLong.self) {
            var allowance = Int.max
            _ = try session.receive([UInt8](repeating: UInt8(ascii: "?"), count: GpsdSession.maxCommand + 1),
                                    snapshot: Self.snapshot, allowance: &allowance) { $0 }
        }
    }

    @Test func unknownCommandsGetGpsdsError() throws {
        let reports = try Self.exchange("?FROBNICATE;hello\n?VERSION;", level: .city)
        #expect(reports.map { $0["class"] } == [.string("ERROR"), .string("ERROR"), .string("VERSION")])
        #expect(reports[2]["proto_major"] == .integer(3))
    }

    /// Commands past the allowance wait, in order, and cost the server nothing until it
    /// grants more; blank ones (";\n" after a command) cost nothing.
    @Test func commandsPastTheAllowanceWaitInOrder() throws {
        var session = GpsdSession(level: .city)
        var allowance = 2
        let first = try session.receive(Array("?VERSION;\n?DEVICES;\n?POLL;?VERSION;".utf8), snapshot: Self.snapshot,
                                        allowance: &allowance) { $0 }
        #expect(try Self.reports(first).map { $0["class"] } == [.string("VERSION"), .string("DEVICES")])
        #expect(allowance == 0 && session.hasWaitingCommand)
        #expect(session.answerWaiting(snapshot: Self.snapshot, allowance: &allowance) { $0 }.isEmpty)
        allowance = 5
        let rest = session.answerWaiting(snapshot: Self.snapshot, allowance: &allowance) { $0 }
        #expect(try Self.reports(rest).map { $0["class"] } == [.string("POLL"), .string("VERSION")])
        #expect(allowance == 3 && !session.hasWaitingCommand)
    }

    /// Waiting finished commands do not count as one endless command; an unfinished one does.
    @Test func waitingCommandsAreNotTooLong() throws {
        var session = GpsdSession(level: .city)
        var allowance = 0
        let many = String(repeating: "?POLL;", count: GpsdSession.maxCommand / 6 + 10)
        _ = try session.receive(Array(many.utf8), snapshot: Self.snapshot, allowance: &allowance) { $0 }
        #expect(session.hasWaitingCommand)
        #expect(throws: GpsdSession.TooLong.self) {
            _ = try session.receive([UInt8](repeating: UInt8(ascii: "x"), count: GpsdSession.maxCommand + 1),
                                    snapshot: Self.snapshot, allowance: &allowance) { $0 }
        }
    }

    /// The allowance: the burst at once, then one command per 1/rate second, never above the burst.
    @Test func theAllowanceRefillsAtItsRate() {
        var limits = GpsdCompatibleServer.Limits()
        limits.commandsPerSecond = 10
        limits.commandBurst = 4
        let start = ContinuousClock.now
        var allowance = CommandAllowance(limits, at: start)
        #expect(allowance.available == 4)
        allowance.available = 0
        allowance.refill(at: start + .milliseconds(50), limits)
        #expect(allowance.available == 0)
        #expect(allowance.next(limits) == start + .milliseconds(100))
        allowance.refill(at: start + .milliseconds(250), limits)
        #expect(allowance.available == 2)
        #expect(allowance.next(limits) == start + .milliseconds(300))
        allowance.refill(at: start + .seconds(10), limits)
        #expect(allowance.available == 4)
    }
}
