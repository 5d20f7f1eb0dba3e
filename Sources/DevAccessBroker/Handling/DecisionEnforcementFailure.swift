import DevAccessEnforcement

/// Why a decision could not be enforced.
public enum DecisionEnforcementFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The engine failed (the ledger, mostly); its own case says what to do.
    case engine(EnforcementError)
    /// Nothing runs engine operations any more (the daemon is stopping).
    case unavailable(String)

    public var description: String {
        switch self {
        case .engine(let error): return error.description
        case .unavailable(let why): return "enforcement is not available: \(why)"
        }
    }
}
