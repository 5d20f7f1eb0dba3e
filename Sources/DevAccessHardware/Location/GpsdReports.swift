#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import FoundationEssentials
import Glibc
#endif
import DevAccessCore

// MARK: What a query found (public)

/// gpsd's answer to one query: its version, its receivers and their fixes.
public struct GpsdStatus: Sendable, Hashable {
    public var endpoint: GpsdEndpoint
    /// gpsd's release, e.g. "3.22".
    public var release: String
    /// Repository revision, often equal to the release.
    public var revision: String?
    /// JSON protocol version, e.g. 3.14.
    public var protocolMajor: Int
    public var protocolMinor: Int
    /// The devices gpsd knows, in the order it listed them.
    public var receivers: [GpsdReceiver]

    public init(endpoint: GpsdEndpoint, release: String, revision: String? = nil,
                protocolMajor: Int, protocolMinor: Int, receivers: [GpsdReceiver]) {
        self.endpoint = endpoint
        self.release = release
        self.revision = revision
        self.protocolMajor = protocolMajor
        self.protocolMinor = protocolMinor
        self.receivers = receivers
    }

    /// The best fix any receiver reports.
    public var bestFix: GpsdFixMode { receivers.map(\.fix.mode).max() ?? .notReported }
}

/// One device gpsd reads from (`/dev/ttyACM0`, or a network source such as `tcp://…`).
public struct GpsdReceiver: Sendable, Hashable {
    public var path: String
    /// gpsd's driver name once it identified the device ("NMEA0183", "u-blox").
    public var driver: String?
    /// When gpsd opened the device (its text, ISO 8601); nil while gpsd has it closed.
    public var activated: String?
    public var fix: GpsdFix

    public init(path: String, driver: String? = nil, activated: String? = nil, fix: GpsdFix = GpsdFix()) {
        self.path = path
        self.driver = driver
        self.activated = activated
        self.fix = fix
    }

    public var isActive: Bool { activated != nil }
}

/// The last fix gpsd reported for one receiver.
public struct GpsdFix: Sendable, Hashable {
    public var mode: GpsdFixMode
    /// Degrees, WGS84; present only with a 2D or 3D fix.
    public var latitude: Double?
    public var longitude: Double?

    public init(mode: GpsdFixMode = .notReported, latitude: Double? = nil, longitude: Double? = nil) {
        self.mode = mode
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// TPV `mode` of gpsd_json(5).
public enum GpsdFixMode: Int, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// 0: gpsd has seen no data from the receiver yet (or the TPV came before any).
    case notReported = 0
    /// 1: the receiver talks but has no fix.
    case noFix = 1
    case twoD = 2
    case threeD = 3

    /// "none", "2d" or "3d", the word shown in device details.
    public var word: String {
        switch self {
        case .notReported, .noFix: return "none"
        case .twoD: return "2d"
        case .threeD: return "3d"
        }
    }

    public var hasFix: Bool { self >= .twoD }
    public var description: String { word }

    public static func < (lhs: GpsdFixMode, rhs: GpsdFixMode) -> Bool { lhs.rawValue < rhs.rawValue }
}

// MARK: Wire reports (internal)

/// One line from gpsd, decoded only as far as the query and the watcher need. Reports
/// of other classes (WATCH, GST, ATT, ...) are recognised as gpsd's and skipped.
enum GpsdReport {
    case version(Version)
    case devices([Device])
    /// One receiver opened, identified or closed (`activated` 0).
    case device(Device)
    case tpv(TPV)
    /// Satellites in view; only the receiver is decoded, the line itself is kept by the watcher.
    case sky(device: String?)
    case poll([TPV])
    case error(String)
    case other(String)

    struct Class: Decodable { let `class`: String }

    struct Version: Decodable {
        let release: String
        let rev: String?
        let protoMajor: Int
        let protoMinor: Int
        enum CodingKeys: String, CodingKey {
            case release, rev, protoMajor = "proto_major", protoMinor = "proto_minor"
        }
    }

    struct Devices: Decodable { let devices: [Device] }

    struct Device: Decodable {
        let path: String?
        let driver: String?
        let activated: Activated?
    }

    /// gpsd 3.x sends `activated` as ISO 8601 text, older releases as seconds since
    /// the epoch, and both use 0 for "closed".
    struct Activated: Decodable {
        /// nil: the receiver is closed.
        let text: String?
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                self.text = text.isEmpty ? nil : text
            } else {
                let seconds = try container.decode(Double.self)
                self.text = seconds == 0 ? nil : String(seconds)
            }
        }
    }

    /// The fields of gpsd_json(5)'s TPV that a `LocationFix` carries. `altMSL` (gpsd
    /// 3.20 and later) is preferred to the older `alt`; `epx`/`epy` stand in for `eph`
    /// when a gpsd does not send it.
    struct TPV: Decodable {
        let device: String?
        let mode: Int
        let time: String?
        let lat: Double?
        let lon: Double?
        let altMSL: Double?
        let alt: Double?
        let speed: Double?
        let track: Double?
        let climb: Double?
        let eph: Double?
        let epx: Double?
        let epy: Double?
        let epv: Double?

        /// What gpsd_json(5) cannot mean: a mode outside 0-3, coordinates off the globe.
        var violation: String? {
            if GpsdFixMode(rawValue: mode) == nil { return "mode \(mode), which gpsd_json(5) does not define" }
            if let lat, !(lat >= -90 && lat <= 90) { return "latitude \(lat), which is off the globe" }
            if let lon, !(lon >= -180 && lon <= 180) { return "longitude \(lon), which is off the globe" }
            return nil
        }

        /// The fix as devaccess passes it on, exact. Without a 2D or 3D fix only the
        /// mode and time are kept: gpsd may repeat an old position next to mode 1.
        func fix(device: String?) -> LocationFix {
            guard let mode = GpsdFixMode(rawValue: mode), mode.hasFix else {
                return LocationFix(device: device, mode: self.mode, time: time)
            }
            let horizontal = eph ?? epx.flatMap { x in epy.map { y in (x * x + y * y).squareRoot() } }
            return LocationFix(device: device, mode: mode.rawValue, time: time, latitude: lat, longitude: lon,
                               altitude: mode == .threeD ? altMSL ?? alt : nil, speed: speed, track: track,
                               climb: mode == .threeD ? climb : nil, horizontalError: horizontal,
                               verticalError: mode == .threeD ? epv : nil, accuracy: .exact)
        }
    }

    struct Sky: Decodable { let device: String? }

    struct Poll: Decodable { let tpv: [TPV]? }
    struct Failure: Decodable { let message: String }

    /// Decodes one line. Anything that is not a JSON object with a string `class` is
    /// not gpsd; a known class whose needed fields are missing or mistyped is not either.
    static func decode(_ line: [UInt8], from endpoint: GpsdEndpoint) throws(GpsdError) -> GpsdReport {
        let data = Data(line)
        let decoder = JSONDecoder()
        let tag: Class
        do {
            tag = try decoder.decode(Class.self, from: data)
        } catch {
            throw .garbage(endpoint, Self.isJSON(data)
                ? "JSON without gpsd's \"class\" field: \(GpsdConnection.preview(line))"
                : "a line that is not JSON: \(GpsdConnection.preview(line))")
        }
        func decode<T: Decodable>(_ type: T.Type) throws(GpsdError) -> T {
            do {
                return try decoder.decode(type, from: data)
            } catch {
                throw .garbage(endpoint, "a \(tag.class) report that does not follow gpsd_json(5): "
                    + Self.explain(error))
            }
        }
        switch tag.class {
        case "VERSION": return .version(try decode(Version.self))
        case "DEVICES": return .devices(try decode(Devices.self).devices)
        case "DEVICE": return .device(try decode(Device.self))
        case "TPV":
            let tpv = try decode(TPV.self)
            if let violation = tpv.violation { throw .garbage(endpoint, "a TPV report with \(violation)") }
            return .tpv(tpv)
        case "SKY": return .sky(device: try decode(Sky.self).device)
        case "POLL":
            let tpvs = try decode(Poll.self).tpv ?? []
            if let violation = tpvs.lazy.compactMap(\.violation).first {
                throw .garbage(endpoint, "a POLL report with \(violation)")
            }
            return .poll(tpvs)
        case "ERROR": return .error(try decode(Failure.self).message)
        default: return .other(tag.class)
        }
    }

    /// The VERSION banner gpsd greets every connection with; any other first report
    /// means the peer is not gpsd.
    func banner(from endpoint: GpsdEndpoint) throws(GpsdError) -> Version {
        let name: String
        switch self {
        case .version(let banner): return banner
        case .error(let message): throw .gpsdError(endpoint, message)
        case .devices: name = "DEVICES"
        case .device: name = "DEVICE"
        case .tpv: name = "TPV"
        case .sky: name = "SKY"
        case .poll: name = "POLL"
        case .other(let other): name = other
        }
        throw .garbage(endpoint, "its first report was \(name), not gpsd's VERSION banner")
    }

    private static func isJSON(_ data: Data) -> Bool {
        struct Anything: Decodable { init(from decoder: any Decoder) throws {} }
        return (try? JSONDecoder().decode(Anything.self, from: data)) != nil
    }

    /// "missing \"mode\"" / "\"mode\" has the wrong type", without Foundation's long debug text.
    private static func explain(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "unreadable" }
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (key.map { [$0] } ?? [])
            return keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing \"\(path(context, key))\""
        case .valueNotFound(_, let context): return "\"\(path(context))\" is null"
        case .typeMismatch(_, let context): return "\"\(path(context))\" has the wrong type"
        case .dataCorrupted(let context): return "bad value at \"\(path(context))\""
        @unknown default: return "unreadable"
        }
    }
}
