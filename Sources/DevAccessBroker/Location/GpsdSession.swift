import DevAccessSystem
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessEnforcement
import DevAccessHardware
import DevAccessProtocol
import DevAccessInterface

/// One client of the gpsd-compatible endpoint, as gpsd_json(5) defines the exchange: the
/// `?COMMAND[=JSON];` lines it sends and the reports it gets, at its grant's accuracy.
///
/// Enough of gpsd's protocol for its clients (gpspipe, cgps, libgps programs): VERSION,
/// DEVICES, WATCH (JSON only), POLL, TPV and SKY. What would bypass the gate or change the
/// receiver for everyone (`nmea`/`raw` watching, which carries the receiver's own
/// sentences, and `?DEVICE=`) is refused with gpsd's ERROR report.
struct GpsdSession {
    var level: LocationAccuracy
    private(set) var watching = false
    private var sentGeneration: UInt64?
    /// The receivers a watcher was last told of: a change is sent as DEVICES, as gpsd does.
    private var sentReceivers: [LocationSnapshot.Receiver] = []
    private var input: [UInt8] = []
    /// gpsd's own command buffer is 1 KiB; 4 KiB leaves room and stops a client that never
    /// ends a command.
    static let maxCommand = 4096

    init(level: LocationAccuracy) {
        self.level = level
    }

    struct TooLong: Error {}

    /// The banner gpsd sends first on every connection.
    static func banner(_ snapshot: LocationSnapshot) -> [UInt8] {
        line(.object([
            JSONMember("class", .string("VERSION")),
            JSONMember("release", .string(snapshot.release ?? "3.22")),
            JSONMember("rev", .string(GpsdClient.brokerRevision)),
            JSONMember("proto_major", .integer(3)),
            JSONMember("proto_minor", .integer(14)),
        ]))
    }

    static func error(_ message: String) -> [UInt8] {
        line(.object([JSONMember("class", .string("ERROR")), JSONMember("message", .string(message))]))
    }

    /// Takes bytes from the client and answers the commands they complete, up to
    /// `allowance` of them (each answered one takes one); the rest wait, in order, for
    /// `answerWaiting`.
    mutating func receive(_ bytes: some Collection<UInt8>, snapshot: LocationSnapshot, allowance: inout Int,
                          serve: (LocationFix) -> LocationFix) throws(TooLong) -> [UInt8] {
        input.append(contentsOf: bytes)
        let out = answerWaiting(snapshot: snapshot, allowance: &allowance, serve: serve)
        // Only the unfinished command counts against the limit: finished ones wait for the
        // allowance, and the server reads nothing more from a client while they do.
        let unfinished = input.count - (input.lastIndex(where: Self.endsCommand).map { $0 + 1 } ?? 0)
        guard unfinished <= Self.maxCommand else { throw TooLong() }
        return out
    }

    /// A finished command waits for the allowance.
    var hasWaitingCommand: Bool { input.contains(where: Self.endsCommand) }

    /// Answers finished commands while `allowance` lasts; blank ones cost nothing.
    mutating func answerWaiting(snapshot: LocationSnapshot, allowance: inout Int,
                                serve: (LocationFix) -> LocationFix) -> [UInt8] {
        var out: [UInt8] = []
        while let end = input.firstIndex(where: Self.endsCommand) {
            let blank = input[..<end].allSatisfy { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: "\r") }
            if !blank {
                guard allowance > 0 else { break }
                allowance -= 1
                out += answer(Array(input[..<end]), snapshot: snapshot, serve: serve)
            }
            input.removeSubrange(...end)
        }
        return out
    }

    /// gpsd ends a command at ';' or a newline.
    private static func endsCommand(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ";") || byte == UInt8(ascii: "\n")
    }

    /// What a watching client is sent when the snapshot changed since it was last sent one.
    mutating func update(_ snapshot: LocationSnapshot, serve: (LocationFix) -> LocationFix) -> [UInt8] {
        update(snapshot) { level in Self.reports(snapshot, level: level, serve: serve) }
    }

    /// The same, with the reports made by `encoded` for this session's level: a server with
    /// many watchers encodes a snapshot once per level rather than once per client.
    mutating func update(_ snapshot: LocationSnapshot, encoded: (LocationAccuracy) -> [UInt8]) -> [UInt8] {
        guard watching, sentGeneration != snapshot.generation else { return [] }
        sentGeneration = snapshot.generation
        var out: [UInt8] = []
        if snapshot.receivers != sentReceivers {
            sentReceivers = snapshot.receivers
            out += Self.devices(snapshot)
        }
        return out + encoded(level)
    }

    private mutating func answer(_ command: [UInt8], snapshot: LocationSnapshot,
                                 serve: (LocationFix) -> LocationFix) -> [UInt8] {
        let text = String(decoding: command, as: UTF8.self).trimmingWhitespace()
        guard !text.isEmpty else { return [] }
        guard text.hasPrefix("?") else { return Self.error("Unrecognized request '\(Self.shown(text))'") }
        let body = text.dropFirst()
        let name = String(body.prefix { $0 != "=" })
        let argument = body.firstIndex(of: "=").map { String(body[body.index(after: $0)...]) }
        switch name {
        case "VERSION":
            return Self.banner(snapshot)
        case "DEVICES":
            return Self.devices(snapshot)
        case "WATCH":
            return watch(argument, snapshot: snapshot, serve: serve)
        case "POLL":
            return Self.poll(snapshot, level: level, serve: serve)
        case "DEVICE":
            return Self.error("devaccessd does not pass on ?DEVICE: it would change the receiver for every program")
        default:
            return Self.error("Unrecognized request '\(Self.shown(name))'")
        }
    }

    private mutating func watch(_ argument: String?, snapshot: LocationSnapshot,
                                serve: (LocationFix) -> LocationFix) -> [UInt8] {
        var members: [JSONMember] = []
        if let argument {
            guard case .object(let given)? = try? JSONParser.parse(Array(argument.utf8)) else {
                return Self.error("Invalid WATCH: '\(Self.shown(argument))' is not a JSON object")
            }
            members = given
        }
        func flag(_ key: String) -> Bool? {
            guard let member = members.last(where: { $0.key == key }) else { return nil }
            switch member.value {
            case .bool(let value): return value
            case .integer(let value): return value != 0
            default: return nil
            }
        }
        for key in ["nmea", "raw"] where flag(key) == true {
            return Self.error("devaccessd serves JSON reports only: '\(key)' would pass on the receiver's own "
                + "sentences, at full accuracy")
        }
        var out: [UInt8] = []
        if argument != nil {
            let enable = flag("enable") ?? true
            if enable && !watching { out += Self.devices(snapshot) }
            watching = enable
        }
        out += Self.line(.object([
            JSONMember("class", .string("WATCH")), JSONMember("enable", .bool(watching)),
            JSONMember("json", .bool(watching)), JSONMember("nmea", .bool(false)), JSONMember("raw", .integer(0)),
            JSONMember("scaled", .bool(false)), JSONMember("timing", .bool(false)), JSONMember("split24", .bool(false)),
            JSONMember("pps", .bool(false)),
        ]))
        if watching {
            sentGeneration = snapshot.generation
            sentReceivers = snapshot.receivers
            out += reports(snapshot, serve: serve)
        }
        return out
    }

    private func reports(_ snapshot: LocationSnapshot, serve: (LocationFix) -> LocationFix) -> [UInt8] {
        Self.reports(snapshot, level: level, serve: serve)
    }

    /// The TPV of each fix as `serve` gives it, and its receiver's SKY at exact only.
    static func reports(_ snapshot: LocationSnapshot, level: LocationAccuracy,
                        serve: (LocationFix) -> LocationFix) -> [UInt8] {
        var out: [UInt8] = []
        for fix in snapshot.fixes {
            out += Self.line(Self.tpv(serve(fix)))
            if level == .exact, let device = fix.device, let sky = snapshot.sky[device] {
                out += Array(sky.utf8) + [UInt8(ascii: "\n")]
            }
        }
        return out
    }

    static func devices(_ snapshot: LocationSnapshot) -> [UInt8] {
        line(.object([
            JSONMember("class", .string("DEVICES")),
            JSONMember("devices", .array(snapshot.receivers.map { receiver in
                var members = [JSONMember("class", .string("DEVICE")), JSONMember("path", .string(receiver.path))]
                if let driver = receiver.driver { members.append(JSONMember("driver", .string(driver))) }
                if let activated = receiver.activated { members.append(JSONMember("activated", .string(activated))) }
                return .object(members)
            })),
        ]))
    }

    static func poll(_ snapshot: LocationSnapshot, level: LocationAccuracy,
                     serve: (LocationFix) -> LocationFix) -> [UInt8] {
        let sky: [JSONValue] = level == .exact ? snapshot.fixes.compactMap { fix in
            fix.device.flatMap { snapshot.sky[$0] }.flatMap { try? JSONParser.parse(Array($0.utf8)) }
        } : []
        return line(.object([
            JSONMember("class", .string("POLL")),
            JSONMember("time", .string(ISOTime.format(Date()))),
            JSONMember("active", .integer(Int64(snapshot.receivers.filter { $0.activated != nil }.count))),
            JSONMember("tpv", .array(snapshot.fixes.map { tpv(serve($0)) })),
            JSONMember("sky", .array(sky)),
        ]))
    }

    /// A TPV report with the fields the served fix has.
    static func tpv(_ fix: LocationFix) -> JSONValue {
        var members = [JSONMember("class", .string("TPV"))]
        if let device = fix.device { members.append(JSONMember("device", .string(device))) }
        members.append(JSONMember("mode", .integer(Int64(fix.mode))))
        if let time = fix.time { members.append(JSONMember("time", .string(time))) }
        func number(_ key: String, _ value: Double?) {
            if let value, value.isFinite { members.append(JSONMember(key, .number(value))) }
        }
        number("lat", fix.latitude)
        number("lon", fix.longitude)
        number("altMSL", fix.altitude)
        // gpsd before 3.20 and clients built for it read `alt`.
        number("alt", fix.altitude)
        number("eph", fix.horizontalError)
        number("epv", fix.verticalError)
        number("speed", fix.speed)
        number("track", fix.track)
        number("climb", fix.climb)
        return .object(members)
    }

    static func line(_ value: JSONValue) -> [UInt8] {
        JSONWriter.bytes(value) + [UInt8(ascii: "\n")]
    }

    /// A client's text in an ERROR report: printable and short.
    static func shown(_ text: String) -> String {
        String(TerminalText.field(text).prefix(64))
    }
}
