import Synchronization

/// Tells who watches a ledger that a write transaction committed, after the commit: the
/// one signal behind every push of devaccessd (the gpsd endpoint looking a grant up again,
/// `audit --follow`, status subscriptions). Commits made through other `Ledger` objects or
/// other processes are not seen; devaccessd is the ledger's only writer.
public final class LedgerCommits: Sendable {
    /// A handle to stop observing.
    public struct Observation: Sendable, Hashable {
        fileprivate let id: UInt64
    }

    /// What committed: the transaction's events (none when it wrote rows only) and the
    /// count of commits so far, this one included.
    public struct Commit: Sendable {
        public var events: [RecordedAuditEvent]
        public var generation: UInt64
    }

    private struct State: Sendable {
        var generation: UInt64 = 0
        var nextID: UInt64 = 0
        var observers: [UInt64: @Sendable (Commit) -> Void] = [:]
    }

    private let state = Mutex(State())

    init() {}

    /// Commits so far; compare two readings to learn whether anything committed between.
    public var generation: UInt64 { state.withLock { $0.generation } }

    var isObserved: Bool { state.withLock { !$0.observers.isEmpty } }

    /// `body` is called after each commit, on the writing thread, while the writer waits
    /// for it: it must return quickly (signal an eventfd, yield to a stream) and must not
    /// write to the ledger.
    public func observe(_ body: @escaping @Sendable (Commit) -> Void) -> Observation {
        state.withLock { state in
            defer { state.nextID &+= 1 }
            state.observers[state.nextID] = body
            return Observation(id: state.nextID)
        }
    }

    public func cancel(_ observation: Observation) {
        state.withLock { _ = $0.observers.removeValue(forKey: observation.id) }
    }

    func committed(_ events: [RecordedAuditEvent]) {
        let (commit, observers) = state.withLock { state in
            state.generation &+= 1
            return (Commit(events: events, generation: state.generation), Array(state.observers.values))
        }
        for observer in observers { observer(commit) }
    }
}
