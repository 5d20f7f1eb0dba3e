import DevAccessCore

/// What a `GpsdWatcher` knows at one moment: whether it is connected to gpsd, why not,
/// the receivers gpsd lists and the latest fix and satellite report of each.
///
/// Positions are only ever from the current connection: when it ends, fixes and
/// satellites are dropped with it, so a stale position is never served as current.
public struct GpsdWatchState: Sendable, Hashable {
    public var endpoint: GpsdEndpoint
    /// True from gpsd's VERSION banner until the connection ends.
    public var connected: Bool
    /// What went wrong last, as a sentence (a `GpsdError` description); nil while
    /// connected, and before the first attempt.
    public var problem: String?
    /// gpsd's release ("3.22") from the current connection's banner.
    public var release: String?
    /// The receivers gpsd lists, in the order it announced them. `fix` carries the mode
    /// and coordinates of the receiver's latest TPV.
    public var receivers: [GpsdReceiver]
    /// The latest TPV of each listed receiver that sent one (`accuracy` exact), in the
    /// order of `receivers`.
    public var fixes: [LocationFix]
    /// When each receiver's fix arrived, by receiver path (this machine's monotonic clock,
    /// not the receiver's time): lets a reader judge a fix's age.
    public var fixReceived: [String: ContinuousClock.Instant]
    /// The latest SKY report of each receiver, by receiver path, as the line gpsd sent
    /// (JSON, without the newline), to be relayed as is.
    public var sky: [String: String]
    /// Bumped on every change; `GpsdWatcher.waitForChange(after:timeout:)` waits on it.
    public var generation: UInt64
    /// gpsd sent its device list on the current connection: `receivers` is its answer, not
    /// the empty list of a connection still in its handshake.
    public var listed = false

    public init(endpoint: GpsdEndpoint, connected: Bool = false, problem: String? = nil, release: String? = nil,
                receivers: [GpsdReceiver] = [], fixes: [LocationFix] = [],
                fixReceived: [String: ContinuousClock.Instant] = [:], sky: [String: String] = [:],
                generation: UInt64 = 0) {
        self.endpoint = endpoint
        self.connected = connected
        self.problem = problem
        self.release = release
        self.receivers = receivers
        self.fixes = fixes
        self.fixReceived = fixReceived
        self.sky = sky
        self.generation = generation
    }

    /// The fix to serve when a program asks for "the" position: one with coordinates,
    /// 3D before 2D, and among equals the one that arrived last.
    public var bestFix: LocationFix? {
        fixes.filter(\.hasPosition).max { lhs, rhs in
            if lhs.mode != rhs.mode { return lhs.mode < rhs.mode }
            return received(lhs) < received(rhs)
        }
    }

    private func received(_ fix: LocationFix) -> ContinuousClock.Instant? {
        fix.device.flatMap { fixReceived[$0] }
    }
}

private func < (lhs: ContinuousClock.Instant?, rhs: ContinuousClock.Instant?) -> Bool {
    switch (lhs, rhs) {
    case (nil, .some): return true
    case (.some(let lhs), .some(let rhs)): return lhs < rhs
    default: return false
    }
}

/// A change a `GpsdWatcher` reports to its change handler (for `devaccess monitor`).
public enum GpsdWatchEvent: Sendable, Hashable, CustomStringConvertible {
    /// gpsd's banner arrived on a new connection.
    case connected(release: String)
    /// The connection ended or could not be made, with the reason. Sent when a connection
    /// ends and when the reason for failing changes, not on every retry.
    case disconnected(problem: String)
    /// gpsd lists a receiver it did not list before.
    case receiverAdded(path: String)
    /// gpsd closed a receiver, or the connection to gpsd ended (then the watcher knows of
    /// no receiver until it is back).
    case receiverRemoved(path: String)
    /// A receiver's fix changed between none, 2D and 3D (in either direction). A change
    /// between `.notReported` and `.noFix` alone is not reported: both mean no position.
    case fixModeChanged(device: String, from: GpsdFixMode, to: GpsdFixMode)

    public var description: String {
        switch self {
        case .connected(let release): return "connected to gpsd \(release)"
        case .disconnected(let problem): return "disconnected: \(problem)"
        case .receiverAdded(let path): return "receiver \(path) added"
        case .receiverRemoved(let path): return "receiver \(path) removed"
        case .fixModeChanged(let device, let from, let to): return "receiver \(device): fix \(from) -> \(to)"
        }
    }
}
