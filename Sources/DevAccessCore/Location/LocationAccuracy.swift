/// How precisely a location grant lets a program know where the machine is: the levels of
/// xdg-desktop-portal's location portal, and iOS's and Android's precise/approximate split
/// made finer. Ordered from coarsest to finest, so `min` of two levels is the stricter.
public enum LocationAccuracy: String, Sendable, Hashable, CaseIterable, Comparable, CustomStringConvertible {
    case country
    case city
    case neighborhood
    case street
    case exact

    /// The side of a grid cell the coordinates are snapped to, in metres; nil for exact.
    public var cellMeters: Double? {
        switch self {
        case .country: return 300_000
        case .city: return 10_000
        case .neighborhood: return 1_000
        case .street: return 100
        case .exact: return nil
        }
    }

    /// "about 10 km", for prompts and status lines.
    public var approximately: String {
        switch self {
        case .exact: return "as exact as the receiver gives"
        case .street: return "about 100 m"
        case .neighborhood: return "about 1 km"
        case .city: return "about 10 km"
        case .country: return "about 300 km"
        }
    }

    public var description: String { rawValue }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rank < rhs.rank }

    private var rank: Int { Self.allCases.firstIndex(of: self) ?? 0 }

    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var text: String
        public var description: String {
            "'\(text)' is not a location accuracy; use one of: "
                + LocationAccuracy.allCases.reversed().map(\.rawValue).joined(separator: ", ")
        }
    }

    public static func parse(_ text: String) throws(ParseError) -> LocationAccuracy {
        guard let level = LocationAccuracy(rawValue: text.lowercased()) else { throw ParseError(text: text) }
        return level
    }
}
