/// A kind of access a subject can ask for: `camera`, `microphone`, `location`.
///
/// A struct over its name rather than an enum, so that later permissions
/// (`speaker`, `usb:<vid:pid>`, `serial`) can be added without changing every switch.
public struct Permission: RawRepresentable, Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let camera = Permission(rawValue: "camera")
    public static let microphone = Permission(rawValue: "microphone")
    public static let location = Permission(rawValue: "location")

    /// The permissions this build knows how to probe, in display order.
    public static let all: [Permission] = [.camera, .microphone, .location]

    /// Parses a user-supplied name (case-insensitive); nil when unknown.
    public init?(parsing name: String) {
        let lowered = name.lowercased()
        guard let match = Permission.all.first(where: { $0.rawValue == lowered }) else { return nil }
        self = match
    }

    public var description: String { rawValue }

    public static func < (lhs: Permission, rhs: Permission) -> Bool {
        let order = Permission.all
        switch (order.firstIndex(of: lhs), order.firstIndex(of: rhs)) {
        case let (l?, r?): return l < r
        case (_?, nil): return true
        case (nil, _?): return false
        case (nil, nil): return lhs.rawValue < rhs.rawValue
        }
    }
}
