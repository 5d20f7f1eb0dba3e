/// Durations as people write them on command lines and in config: `90s`, `15m`,
/// `8h`, `7d`, or combined like `1h30m`. One parser for the CLI and the policy.
public enum DurationText {
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public var text: String
        public var description: String {
            "'\(text)' is not a duration; write a number with a unit s, m, h, d or w (90s, 15m, 8h, 7d, 2w, 1h30m)"
        }
    }

    static let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
    /// Ten years: longer is a typo or an attempt to overflow, not a grant.
    public static let maximumSeconds: Int64 = 10 * 366 * 86_400

    public static func seconds(_ text: String) throws(ParseError) -> Int64 {
        var total: Int64 = 0
        var number: Int64?
        var sawUnit = false
        for character in text {
            if let digit = character.wholeNumberValue, character.isASCII {
                let current = number ?? 0
                guard current < maximumSeconds else { throw ParseError(text: text) }
                number = current * 10 + Int64(digit)
            } else if let unit = units[character], let value = number {
                total += value * unit
                guard total <= maximumSeconds else { throw ParseError(text: text) }
                number = nil
                sawUnit = true
            } else {
                throw ParseError(text: text)
            }
        }
        // A trailing bare number ("90") is refused: minutes or seconds would be a guess.
        guard number == nil, sawUnit, total > 0 else { throw ParseError(text: text) }
        return total
    }

    public static func parse(_ text: String) throws(ParseError) -> Duration {
        .seconds(try seconds(text))
    }

    /// `1h30m`, `15m`, `7d`: the shortest text that parses back to the same value.
    public static func format(seconds: Int64) -> String {
        if seconds <= 0 { return "0s" }
        var rest = seconds
        var text = ""
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        return text
    }
}
