/// The outcome of `Ledger.verify()`.
public enum ChainVerification: Sendable, Hashable, CustomStringConvertible {
    /// Every event hashes to its stored value and links to the one before it.
    case intact(count: Int64)
    /// The first place where the chain is not as written.
    case broken(ChainBreak)

    public var isIntact: Bool {
        if case .intact = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .intact(let count): return "audit chain intact: \(count) events"
        case .broken(let chainBreak): return "audit chain broken: \(chainBreak)"
        }
    }
}

/// Where and how the chain breaks.
public struct ChainBreak: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        /// The event's fields no longer match its hash, or it was rewritten with a new hash.
        case edited
        /// Events are missing (a seq gap, a truncated tail, or renumbered survivors).
        case removed
        /// Events are present but in a different order than they were written.
        case reordered
        /// Events were added behind the chain head's back (not by devaccess).
        case inserted
    }

    /// The seq number at which the chain first goes wrong.
    public var seq: Int64
    public var kind: Kind
    public var explanation: String

    public init(seq: Int64, kind: Kind, explanation: String) {
        self.seq = seq
        self.kind = kind
        self.explanation = explanation
    }

    public var description: String { "event \(seq) \(kind.rawValue): \(explanation)" }
}
