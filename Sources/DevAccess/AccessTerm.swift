import DevAccessProtocol

/// How long a grant asked for with ``DeviceAccess/request(_:reason:required:term:accuracy:waitForApproval:)``
/// holds. The machine's policy may shorten it (`MaxDuration=`); the result says so.
public enum AccessTerm: Sendable, Hashable {
    /// While this process runs: devaccessd watches it (a pidfd) and ends the grant when
    /// it exits.
    case once
    /// For a time from the decision (1 second to 366 days).
    case `for`(Duration)
    /// Until revoked.
    case always

    var scope: GrantTerm {
        switch self {
        case .once:
            return .once
        case .always:
            return .always
        case .for(let duration):
            // Whole seconds, at least one, at most what the protocol takes.
            let seconds = duration.components.seconds + (duration.components.attoseconds > 0 ? 1 : 0)
            return .duration(seconds: min(max(seconds, 1), GrantTerm.maxDurationSeconds))
        }
    }
}

extension Duration {
    /// `hours` hours, for terms such as `.for(.hours(1))`.
    public static func hours(_ hours: Int) -> Duration { .seconds(Int64(hours) * 3600) }
    /// `minutes` minutes.
    public static func minutes(_ minutes: Int) -> Duration { .seconds(Int64(minutes) * 60) }
}
