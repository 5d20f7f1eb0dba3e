import Synchronization
import DevAccessCore

/// What the source knows now, for the gpsd-compatible endpoint.
public struct LocationSnapshot: Sendable, Hashable {
    /// Grows with every change: a server compares it to see whether to send.
    public var generation: UInt64
    /// gpsd's release ("3.22"); nil before the first connection.
    public var release: String?
    public var receivers: [Receiver]
    /// The newest fix of each receiver that has one (mode 1 included: "no fix").
    public var fixes: [LocationFix]
    /// Each receiver's newest SKY report as gpsd sent it: satellites say where one is, so
    /// it goes only to exact grants.
    public var sky: [String: String]

    public struct Receiver: Sendable, Hashable {
        public var path: String
        public var driver: String?
        public var activated: String?

        public init(path: String, driver: String? = nil, activated: String? = nil) {
            self.path = path
            self.driver = driver
            self.activated = activated
        }
    }

    public init(generation: UInt64, release: String? = nil, receivers: [Receiver] = [], fixes: [LocationFix] = [],
                sky: [String: String] = [:]) {
        self.generation = generation
        self.release = release
        self.receivers = receivers
        self.fixes = fixes
        self.sky = sky
    }
}

/// Where devaccessd's positions come from: the gpsd watcher (`GpsdWatcher`).
public protocol LocationSource: Sendable {
    /// Starts watching; idempotent. The first location request calls it, so gpsd keeps no
    /// receiver powered for a machine nobody asks about.
    func start()
    /// The newest fix with a position (3D before 2D), or nil.
    func currentFix() -> LocationFix?
    /// Why there is no fix, said for the person who asked ("gpsd at 127.0.0.1:2947 refused
    /// the connection", "no receiver", "/dev/ttyACM0 has no fix yet").
    func problem() -> String
    func snapshot() -> LocationSnapshot
    /// `body` is called after each change of the snapshot, on the source's thread; it must
    /// return quickly. How the endpoint and waiting requests hear of a fix at once.
    func observeChanges(_ body: @escaping @Sendable () -> Void) -> LocationObservation
}

/// Observing a `LocationSource` until `cancel()`.
public struct LocationObservation: Sendable {
    public let cancel: @Sendable () -> Void
}

/// Serves fixes at an accuracy. One `LocationBlur` per receiver for everyone: two callers
/// at one level see the same cell, and nobody learns more by asking twice or in turns.
final class LocationServing: Sendable {
    let source: any LocationSource
    private let blurs = Mutex<[String: LocationBlur]>([:])
    init(source: any LocationSource) {
        self.source = source
    }

    enum Outcome: Sendable {
        /// `waited`: there was none at first, so the grant may have changed meanwhile.
        case served(LocationFix, waited: Bool)
        case unavailable(String)
    }

    /// The newest fix at `level`, waiting up to `wait` for a first one. Waiting holds no
    /// thread and polls nothing: the source's change wakes it. A caller that waits costs a
    /// connection, which the server limits per user.
    func fix(at level: LocationAccuracy, wait: Duration) async -> Outcome {
        source.start()
        if let fix = source.currentFix() { return .served(serve(fix, at: level), waited: false) }
        guard wait > .zero else { return .unavailable(source.problem()) }
        let (changes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let observation = source.observeChanges { continuation.yield() }
        let timer = Task {
            try? await Task.sleep(for: wait)
            continuation.finish()
        }
        defer {
            observation.cancel()
            timer.cancel()
        }
        return await withTaskCancellationHandler {
            // Looked at again once observed: a fix that came in between is not missed.
            if let fix = source.currentFix() { return .served(serve(fix, at: level), waited: true) }
            for await _ in changes {
                if let fix = source.currentFix() { return .served(serve(fix, at: level), waited: true) }
            }
            return .unavailable(source.problem())
        } onCancel: {
            continuation.finish()
        }
    }

    func serve(_ fix: LocationFix, at level: LocationAccuracy) -> LocationFix {
        blurs.withLock { blurs in
            var blur = blurs[fix.device ?? "", default: LocationBlur()]
            let served = blur.serve(fix, at: level)
            blurs[fix.device ?? ""] = blur
            return served
        }
    }
}
