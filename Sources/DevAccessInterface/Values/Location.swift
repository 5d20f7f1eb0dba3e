import DevAccessCore

/// `location`: the machine's position, from the gpsd devaccessd watches, at
/// the accuracy the caller's location grant allows (or a coarser one it asks for). The
/// answer is a `result` whose document is `devaccess location --json`'s (docs/json.md).
public struct LocationQuery: Sendable, Hashable {
    /// nil: the granted level. Asking for more than the grant is refused, not coarsened:
    /// the caller should know it got less than it asked for.
    public var accuracy: LocationAccuracy?
    /// How long to wait for a first fix when gpsd has none yet, in milliseconds.
    public var waitMilliseconds: Int64

    /// Five seconds: a receiver that just started needs a few epochs to be identified.
    public static let defaultWait: Int64 = 5_000
    /// Half a minute, well inside a client's reply timeout (60 s): a cold receiver may need
    /// longer, and its client should ask again.
    public static let maxWait: Int64 = 30_000

    public init(accuracy: LocationAccuracy? = nil, waitMilliseconds: Int64 = LocationQuery.defaultWait) {
        self.accuracy = accuracy
        self.waitMilliseconds = waitMilliseconds
    }
}
