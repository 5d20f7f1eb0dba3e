import DevAccessCore

/// `location` (the `devaccess location --json` document): one fix, at the accuracy served.
/// Fields a level withholds are absent, not zero.
public struct LocationDocument: Codable, Sendable, Hashable {
    /// The level these figures have ("city"), and the caller's grant ("exact").
    public var accuracy: String
    public var granted: String
    /// "about 10 km".
    public var approximately: String
    /// The receiver, as gpsd names it.
    public var device: String?
    /// "2d" or "3d".
    public var fix: String
    /// gpsd's TPV mode (2 or 3).
    public var mode: Int
    /// The receiver's time of the fix (ISO 8601, UTC).
    public var time: String?
    public var latitude: Double
    public var longitude: Double
    /// Metres above mean sea level.
    public var altitude: Double?
    /// Metres per second; degrees from true north; metres per second upwards.
    public var speed: Double?
    public var track: Double?
    public var climb: Double?
    /// Estimated errors in metres; below exact, the level's cell (and altitude step).
    public var eph: Double?
    public var epv: Double?

    public init?(_ fix: LocationFix, granted: LocationAccuracy) {
        guard fix.hasPosition, let latitude = fix.latitude, let longitude = fix.longitude else { return nil }
        accuracy = fix.accuracy.rawValue
        self.granted = granted.rawValue
        approximately = fix.accuracy.approximately
        device = fix.device
        self.fix = fix.mode >= 3 ? "3d" : "2d"
        mode = fix.mode
        time = fix.time
        self.latitude = latitude
        self.longitude = longitude
        altitude = fix.altitude
        speed = fix.speed
        track = fix.track
        climb = fix.climb
        eph = fix.horizontalError
        epv = fix.verticalError
    }
}
