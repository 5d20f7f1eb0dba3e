import DevAccessSystem

/// Why a gpsd query gave no answer. Each case reads as one sentence that says what
/// happened and what to check, because it ends up as the `unavailable` reason people see.
public enum GpsdError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What the client was waiting for when the answer stopped.
    public enum Stage: String, Sendable, Hashable {
        /// gpsd's `VERSION` greeting, sent on every new connection.
        case banner
        /// The `DEVICES` report that answers `?WATCH`.
        case deviceList

        var waitingFor: String {
            switch self {
            case .banner: return "its VERSION banner"
            case .deviceList: return "its device list (DEVICES)"
            }
        }
    }

    /// The host name did not resolve to an address.
    case unresolvable(GpsdEndpoint, String)
    /// Name resolution took longer than the whole time budget.
    case resolutionTimedOut(GpsdEndpoint, Duration)
    /// Nothing listens on the port (ECONNREFUSED).
    case refused(GpsdEndpoint)
    /// connect() failed otherwise: no route, network down, address not available.
    case unreachable(GpsdEndpoint, Errno)
    /// No answer to the connection request at all (packets dropped, host down).
    case connectTimedOut(GpsdEndpoint, Duration)
    /// Connected, but the expected report did not come in time.
    case noAnswer(GpsdEndpoint, Duration, Stage)
    /// The peer closed (or reset) the connection before the expected report.
    case closedEarly(GpsdEndpoint, Stage)
    /// gpsd closed (or reset) a connection that was streaming reports.
    case closed(GpsdEndpoint)
    /// The peer sent bytes that are not gpsd's JSON protocol.
    case garbage(GpsdEndpoint, String)
    /// The peer sent a line longer than the limit without a newline.
    case lineTooLong(GpsdEndpoint, limit: Int)
    /// gpsd answered with an `ERROR` report.
    case gpsdError(GpsdEndpoint, String)
    /// A socket call failed in a way none of the above describes.
    case socket(GpsdEndpoint, operation: String, Errno)
    /// What listens at the endpoint is a program of a login user, not gpsd (a user can
    /// listen on gpsd's port while gpsd is down): its positions are not taken.
    case untrusted(GpsdEndpoint, uid: UInt32)

    public var endpoint: GpsdEndpoint {
        switch self {
        case .unresolvable(let endpoint, _), .resolutionTimedOut(let endpoint, _), .refused(let endpoint),
             .unreachable(let endpoint, _), .connectTimedOut(let endpoint, _), .noAnswer(let endpoint, _, _),
             .closedEarly(let endpoint, _), .closed(let endpoint), .garbage(let endpoint, _), .lineTooLong(let endpoint, _),
             .gpsdError(let endpoint, _), .socket(let endpoint, _, _), .untrusted(let endpoint, _):
            return endpoint
        }
    }

    public var description: String {
        let fix = "start gpsd there or set \(GpsdEndpoint.environmentVariable) to where it listens"
        switch self {
        case .unresolvable(let endpoint, let detail):
            return "gpsd host \"\(endpoint.host)\" does not resolve (\(detail)); "
                + "check the name in \(GpsdEndpoint.environmentVariable)"
        case .resolutionTimedOut(let endpoint, let budget):
            return "gpsd host \"\(endpoint.host)\" did not resolve within \(GpsdTime.text(budget)); "
                + "use an IP address in \(GpsdEndpoint.environmentVariable) or fix name resolution"
        case .refused(let endpoint):
            return "nothing listens at \(endpoint) (connection refused): gpsd is not running there; \(fix)"
        case .unreachable(let endpoint, let errno):
            return "gpsd at \(endpoint) is unreachable (\(errno)); check the network or "
                + "\(GpsdEndpoint.environmentVariable)"
        case .connectTimedOut(let endpoint, let budget):
            return "gpsd at \(endpoint) did not accept a connection within \(GpsdTime.text(budget)) "
                + "(host down or packets dropped by a firewall); \(fix)"
        case .noAnswer(let endpoint, let budget, let stage):
            return "gpsd at \(endpoint) did not answer within \(GpsdTime.text(budget)): the connection "
                + "was accepted but \(stage.waitingFor) never came (something other than gpsd may "
                + "listen there, or gpsd is stuck)"
        case .closedEarly(let endpoint, let stage):
            return "the service at \(endpoint) closed the connection before sending \(stage.waitingFor); "
                + "it is not gpsd or it is shutting down"
        case .closed(let endpoint):
            return "gpsd at \(endpoint) closed the connection (gpsd stopped, restarted or dropped this client)"
        case .garbage(let endpoint, let detail):
            return "the service at \(endpoint) sent garbage, not gpsd's JSON protocol (\(detail)); "
                + "check that \(GpsdEndpoint.environmentVariable) names gpsd's port"
        case .lineTooLong(let endpoint, let limit):
            return "the service at \(endpoint) sent garbage: a line longer than \(limit / 1024) KiB with no "
                + "newline, which gpsd never sends; check that \(GpsdEndpoint.environmentVariable) names gpsd's port"
        case .gpsdError(let endpoint, let message):
            return "gpsd at \(endpoint) refused the query: \(message)"
        case .socket(let endpoint, let operation, let errno):
            return "talking to gpsd at \(endpoint) failed: \(operation): \(errno)"
        case .untrusted(let endpoint, let uid):
            return "what listens at \(endpoint) is a program of uid \(uid) (a login user's), not gpsd: positions "
                + "from it are not taken (a user can listen on gpsd's port while gpsd is down); start gpsd, which "
                + "runs as root or a system account"
        }
    }
}

/// Millisecond arithmetic for deadlines and messages (a namespace rather than a
/// `Duration` extension, so it cannot clash with other files of the module).
enum GpsdTime {
    /// Whole milliseconds, rounded up, so a budget never reads as shorter than it is.
    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        let fraction = attoseconds > 0 ? (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000 : 0
        return seconds * 1000 + fraction
    }

    /// "500 ms".
    static func text(_ duration: Duration) -> String { "\(milliseconds(duration)) ms" }
}
