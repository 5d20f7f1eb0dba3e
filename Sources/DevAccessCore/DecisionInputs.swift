/// The ledger's and the policy's say about one permission for one subject.
///
/// Status computation takes them as plain values so it stays pure; the ledger and
/// the policy engine fill them in. Both are empty until those components exist.
public struct DecisionInputs: Sendable, Hashable {
    /// A recorded denial: makes the status `denied` (sticky), with this reason.
    public var ledgerDenial: Reason?
    /// Devices (by stable id, nil = all) the ledger allows for the subject.
    public var ledgerAllows: [String?]
    /// A policy rule that forbids the permission: makes the status `restricted`.
    public var policyRestriction: Reason?
    /// Programs (canonical paths) the ledger allows the permission through 'devaccess run'
    /// only: the summary names them rather than "nothing has been decided".
    public var programAllows: [String] = []

    public init(ledgerDenial: Reason? = nil, ledgerAllows: [String?] = [], policyRestriction: Reason? = nil) {
        self.ledgerDenial = ledgerDenial
        self.ledgerAllows = ledgerAllows
        self.policyRestriction = policyRestriction
    }

    public static let none = DecisionInputs()
}
