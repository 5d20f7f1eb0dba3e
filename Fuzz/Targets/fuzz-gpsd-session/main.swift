import DevAccessCore
@testable import DevAccessBroker
import DevAccessProtocol
import FuzzSupport
import DevAccessInterface

/// What a client of the gpsd-compatible endpoint sends (any local program, redirected from
/// gpsd's port): `?COMMAND[=JSON];` bytes, in two reads, at a level picked by the first
/// byte. Every line sent back must be a JSON object, and below `exact` nothing may carry
/// the receiver's exact position or its satellites.
let exactFix = LocationFix(device: "/dev/ttyACM0", mode: 3, time: "2026-11-30T12:00:00.000Z", latitude: 48.1173,
                           longitude: 11.516666667, altitude: 545.4, speed: 1.2, track: 84.4, climb: 0.1,
                           horizontalError: 3.1, verticalError: 5.2)
let snapshot = LocationSnapshot(
    generation: 1, release: "3.22",
    receivers: [.init(path: "/dev/ttyACM0", driver: "NMEA0183", activated: "2026-11-30T11:59:00.000Z")],
    fixes: [exactFix],
    sky: ["/dev/ttyACM0": #"{"class":"SKY","device":"/dev/ttyACM0","satellites":[{"PRN":4,"el":47,"az":95}]}"#])
let levels = LocationAccuracy.allCases

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzGpsdSession(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = fuzzInput(data, size)
    guard input.count >= 2 else { return 0 }
    let level = levels[Int(input[0]) % levels.count]
    let split = min(Int(input[1]), input.count - 2)
    let reads = [input[2..<(2 + split)], input[(2 + split)...]]
    var session = GpsdSession(level: level)
    var blur = LocationBlur()
    var out: [UInt8] = []
    for read in reads {
        var allowance = 8
        do {
            out += try session.receive(read, snapshot: snapshot, allowance: &allowance) { blur.serve($0, at: level) }
        } catch {
            return 0  // the server closes a client whose command grows past the limit
        }
        allowance = Int.max
        out += session.answerWaiting(snapshot: snapshot, allowance: &allowance) { blur.serve($0, at: level) }
    }
    var next = snapshot
    next.generation += 1
    out += session.update(next) { blur.serve($0, at: level) }
    for line in out.split(separator: 0x0a) {
        guard case .object(let members)? = try? JSONParser.parse(line) else {
            fuzzCheck(false, "not a JSON object: \(String(decoding: line, as: UTF8.self))")
            return 0
        }
        guard level != .exact else { continue }
        func value(_ key: String) -> JSONValue? { members.last { $0.key == key }?.value }
        fuzzCheck(value("class") != .string("SKY"), "satellites at \(level)")
        for (key, exact) in [("lat", exactFix.latitude), ("lon", exactFix.longitude)] {
            if case .number(let served)? = value(key) {
                fuzzCheck(served != exact, "exact \(key) at \(level): \(String(decoding: line, as: UTF8.self))")
            }
        }
    }
    return 0
}

runFuzzer(fuzzGpsdSession)
