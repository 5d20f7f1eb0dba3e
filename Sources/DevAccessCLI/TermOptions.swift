import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import FoundationEssentials
import Glibc

/// How long an admin decision holds: `--for DURATION`, `--until TIME` or `--always` (the
/// default). One of them at most.
enum TermOptions {
    static let forOption = OptionSpec(long: "for", short: nil, value: "DURATION",
                                      help: "Hold for this long: 90s, 15m, 8h, 7d, 2w, 1h30m.")
    static let untilOption = OptionSpec(long: "until", short: nil, value: "TIME",
                                        help: "Hold until this ISO 8601 time (2026-12-01T18:00Z; no zone = local).")
    static let alwaysOption = OptionSpec(long: "always", short: nil, value: nil,
                                         help: "Hold until revoked (the default).")
    static let options = [forOption, untilOption, alwaysOption]

    /// `--for`: `lastingSeconds`, counted from when devaccessd records the decision (its
    /// clock, not ours); `--until`: `untilMilliseconds` (Unix time); neither: always.
    static func parse(_ arguments: ParsedArguments, command: String,
                      now: Date) throws(UsageError) -> (lastingSeconds: Int64?, untilMilliseconds: Int64?) {
        let given = ["for", "until", "always"].filter { arguments.value($0) != nil || arguments.has($0) }
        if given.count > 1 {
            throw UsageError(message: "'--\(given[0])' and '--\(given[1])' cannot be combined; give one of "
                + "--for, --until, --always", command: command)
        }
        if let text = arguments.value("for") {
            let seconds: Int64
            do {
                seconds = try DurationText.seconds(text)
            } catch {
                throw UsageError(message: "\(error.description) for '--for'", command: command)
            }
            return (seconds, nil)
        }
        if let text = arguments.value("until") {
            guard let time = ISOTime.parse(text) else {
                throw UsageError(message: "'\(text)' is not a time for '--until'; write ISO 8601, e.g. "
                    + "2026-12-01T18:00:00Z, 2026-12-01T18:00+01:00, or 2026-12-01T18:00 (local time)",
                                 command: command)
            }
            guard time > now else {
                throw UsageError(message: "'--until \(text)' is not in the future", command: command)
            }
            return (nil, Int64((time.timeIntervalSince1970 * 1000).rounded()))
        }
        return (nil, nil)
    }
}
