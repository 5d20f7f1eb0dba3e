import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
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
        time = document.time.flatMap(ISOTime.parse)
    }
}

extension DeviceAccess {
    /// Positions at `accuracy` (nil: the grant's level), one every `interval`, each only
    /// when it differs from the last. devaccessd has no push for positions:
    /// this samples ``location(accuracy:wait:)``, and below `exact` a sample repeats until
    /// the machine moved into another cell. The stream ends with the error of a sample
    /// that failed (`.denied` once the grant is revoked). Programs that speak gpsd's
    /// protocol can instead read devaccessd's gpsd-compatible endpoint (127.0.0.1:947).
    public func locationUpdates(accuracy: LocationAccuracy? = nil,
                                interval: Duration = .seconds(1)) -> AsyncThrowingStream<LocationReading, any Error> {
        let access = self
        return AsyncThrowingStream { continuation in
            let sampler = Task {
                var last: LocationReading?
                while !Task.isCancelled {
                    do throws(DeviceAccessError) {
                        let reading = try await access.location(accuracy: accuracy)
                        if reading.latitude != last?.latitude || reading.longitude != last?.longitude
                            || reading.accuracy != last?.accuracy {
                            continuation.yield(reading)
                            last = reading
                        }
                    } catch {
                        continuation.finish(throwing: error)
                        return
                    }
                    try? await Task.sleep(for: interval)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in sampler.cancel() }
        }
    }
}
