import DevAccessCore
import DevAccessSystem
@testable import DevAccessCLI
import Foundation
import FuzzSupport

/// The durations and times an admin types: `--for` (and the policy's MaxDuration),
/// `--until`, and audit's `--since`/`--until` words. A duration that parses is within the
/// ten-year bound and formats to text that parses back to it; a time that parses (ISOTime,
/// the one reader) formats to UTC text that parses back to the same second.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTime(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let text = String(decoding: fuzzInput(data, size), as: UTF8.self)
    if let seconds = try? DurationText.seconds(text) {
        fuzzCheck(seconds > 0 && seconds <= DurationText.maximumSeconds, "'\(text)' parsed to \(seconds)")
        let shown = DurationText.format(seconds: seconds)
        fuzzCheck((try? DurationText.seconds(shown)) == seconds, "'\(text)' = \(seconds)s formats as '\(shown)'")
    }
    if let time = ISOTime.parse(text) {
        fuzzCheck(time.timeIntervalSince1970.isFinite, "'\(text)' parsed to \(time)")
        let shown = ISOTime.format(time)
        let second = time.timeIntervalSince1970.rounded(.down)
        fuzzCheck(ISOTime.parse(shown)?.timeIntervalSince1970 == second, "'\(text)' = \(time) formats as '\(shown)'")
    }
    _ = AuditTimeWords.resolve(text, now: Date(timeIntervalSince1970: 1_796_000_000))
    return 0
}

runFuzzer(fuzzTime)
