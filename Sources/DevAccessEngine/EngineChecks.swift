import DevAccessCore
import DevAccessEnforcement
import DevAccessInterface
import DevAccessLedger

/// What `doctor` asks of the engine's records and rules, read here without devaccessd.
public enum EngineChecks {
    /// The opt-in deny-by-default rules file under `root` (a staging tree; empty: the live
    /// system): where udev reads it, or where it is masked with /dev/null.
    public static func denyByDefaultRules(root: String) -> (path: String?, masked: String?) {
        DenyByDefaultRules.find(root: root)
    }

    /// The location receivers' nodes and who reads them without devaccessd.
    public static func receivers(_ report: AdapterReport) -> [GateNode] {
        GateAnalyzer.receivers(report)
    }

    /// The ledger file in `stateDirectory`.
    public static func ledgerPath(in stateDirectory: String) -> String {
        stateDirectory + "/" + Ledger.fileName
    }

    /// The ledger's hash chain walked read-only: whether it is intact, and the walk in a
    /// sentence. A ledger that cannot be opened or walked is `ledgerUnusable`.
    public static func verifyLedger(_ file: String) throws(InterfaceError) -> (intact: Bool, summary: String) {
        do {
            let ledger = try Ledger(path: file, mode: .readOnly, journal: .disabled)
            let verification = try ledger.verify()
            return (verification.isIntact, "\(verification)")
        } catch {
            throw .ledgerUnusable(error.description)
        }
    }
}
