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
