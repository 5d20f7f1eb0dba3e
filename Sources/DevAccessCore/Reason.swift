/// One line of "why": a machine-readable kind and a sentence for people.
public struct Reason: Sendable, Hashable, Codable, CustomStringConvertible {
    public struct Kind: RawRepresentable, Hashable, Sendable, Codable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// Summary of the decision.
        public static let summary = Kind(rawValue: "summary")
        /// Hardware or service missing.
        public static let unavailable = Kind(rawValue: "unavailable")
        /// Which rule of mode/ACL/groups gave or refused access on a node.
        public static let access = Kind(rawValue: "access")
        /// A node or device that was looked at and left out, with why.
        public static let skipped = Kind(rawValue: "skipped")
        /// A probe that could not run fully and what was used instead.
        public static let probe = Kind(rawValue: "probe")
        public static let ledger = Kind(rawValue: "ledger")
        public static let policy = Kind(rawValue: "policy")
        /// Kernel state and the ledger disagree.
        public static let drift = Kind(rawValue: "drift")
        public static let service = Kind(rawValue: "service")
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    enum CodingKeys: String, CodingKey { case kind, message }
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        kind = Kind(rawValue: try container.decode(String.self, forKey: .kind))
        message = try container.decode(String.self, forKey: .message)
    }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(kind.rawValue, forKey: .kind)
        try container.encode(message, forKey: .message)
    }
}
