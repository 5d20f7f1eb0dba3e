import DevAccessCore

/// Documented exit codes (docs/devaccess.1 and README). Each status has its own,
/// so scripts can branch on `devaccess check` without parsing output.
public enum ExitCode: Int32, Sendable {
    case authorized = 0
    case failure = 1
    case limited = 2
    case denied = 3
    case notDetermined = 4
    case restricted = 5
    case unavailable = 6
    /// Broker not reachable (used once requests go through devaccessd).
    case brokerUnreachable = 69
    /// Bad command line (sysexits EX_USAGE).
    case usage = 64
    /// `audit --verify` found an edited, removed, reordered or inserted event (EX_DATAERR).
    case auditBroken = 65
    /// The ledger cannot be used: corrupt, not a ledger, written by a newer devaccess,
    /// read-only, disk full (EX_IOERR). Nothing was written.
    case ledgerUnusable = 74
    /// Another process held the ledger locked too long; try again (EX_TEMPFAIL).
    case ledgerBusy = 75
    /// An admin command run without root; later the broker will take it (EX_NOPERM).
    case noPermission = 77
    /// `run`: PROGRAM is there but cannot be run (a shell's 126).
    case cannotExecute = 126
    /// `run`: PROGRAM is not found (a shell's 127).
    case programNotFound = 127

    public static let success = ExitCode.authorized

    public init(_ status: AuthorizationStatus) {
        switch status {
        case .authorized: self = .authorized
        case .limited: self = .limited
        case .denied: self = .denied
        case .notDetermined: self = .notDetermined
        case .restricted: self = .restricted
        case .unavailable: self = .unavailable
        }
    }
}
