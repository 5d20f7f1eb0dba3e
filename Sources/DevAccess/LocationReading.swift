import Foundation
import DevAccessCore
import DevAccessInterface

/// One position, at the accuracy devaccessd served. Below `exact` the coordinates are
/// the centre of a grid cell of the level's size, and speed, track, climb and altitude
/// are withheld (nil).
public struct LocationReading: Sendable, Hashable {
    /// The level of these figures, and the level the user's grant allows.
    public var accuracy: LocationAccuracy
    public var granted: LocationAccuracy
    public var latitude: Double
    public var longitude: Double
    /// Metres above mean sea level (exact only).
    public var altitude: Double?
    /// Metres per second, degrees from true north, metres per second upwards (exact only).
    public var speed: Double?
    public var track: Double?
    public var climb: Double?
    /// Estimated horizontal error in metres; below exact, the level's cell.
    public var horizontalError: Double?
    /// The receiver's time of the fix.
    public var time: Date?
    /// The receiver, as gpsd names it.
    public var device: String?

    init(_ document: LocationDocument) {
        accuracy = LocationAccuracy(rawValue: document.accuracy) ?? .country
        granted = LocationAccuracy(rawValue: document.granted) ?? accuracy
        latitude = document.latitude
        longitude = document.longitude
        altitude = document.altitude
        speed = document.speed
        track = document.track
        climb = document.climb
        horizontalError = document.eph
        device = document.device
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        time = document.time.flatMap { parser.date(from: $0) ?? ISO8601DateFormatter().date(from: $0) }
    }
}
