/// Who or what made a decision: the ledger's `how` column, a request result's `how` in the
/// protocol.
public enum DecisionMethod: String, Sendable, Hashable, CaseIterable {
    /// The subject answered a prompt.
    case consent
    /// The subject proved presence with their password (PAM).
    case authSelf = "auth_self"
    /// An administrator decided (`devaccess grant`, `approve`).
    case admin
    /// Configured policy decided without asking.
    case policy
}
