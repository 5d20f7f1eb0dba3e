import DevAccessCore
@testable import DevAccessCLI
import Foundation
import FuzzSupport

/// The durations and times an admin types: `--for` (and the policy's MaxDuration),
/// `--until`, and audit's `--since`/`--until` words. A duration that parses is within the
/// ten-year bound and formats to text that parses back to it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTime(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let text = String(decoding: fuzzInput(data, size), as: UTF8.self)
    if let seconds = try? DurationText.seconds(text) {
        fuzzCheck(seconds > 0 && seconds <= DurationText.maximumSeconds, "'\(text)' parsed to \(seconds)")
        let shown = DurationText.format(seconds: seconds)
        fuzzCheck((try? DurationText.seconds(shown)) == seconds, "'\(text)' = \(seconds)s formats as '\(shown)'")
    }
    if let time = TimeText.parse(text) {
        fuzzCheck(time.timeIntervalSince1970.isFinite, "'\(text)' parsed to \(time)")
    }
    _ = AuditTimeWords.resolve(text, now: Date(timeIntervalSince1970: 1_796_000_000))
    return 0
}

runFuzzer(fuzzTime)
