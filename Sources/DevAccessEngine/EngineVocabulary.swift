import DevAccessCore
import DevAccessLedger
import DevAccessSystem

/// Words and defaults of the engine's records that a command line checks its arguments
/// against, so that it needs no ledger module of its own.
public enum EngineVocabulary {
    /// Every audit event type the ledger records (`audit --type`).
    public static let auditEventTypes = AuditEventType.known.map(\.rawValue)

    /// The ledger's directory: `$DEVACCESS_STATE_DIR`, else /var/lib/devaccess.
    public static func stateDirectory(_ environment: ProcessEnvironment) -> String {
        Ledger.stateDirectory(environment: environment)
    }
}
