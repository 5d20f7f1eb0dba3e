import Synchronization

/// Tells who watches a ledger that a write transaction committed, after the commit: how
/// devaccessd's gpsd endpoint learns that a grant may have changed. Commits made through
/// other `Ledger` objects or other processes are not seen; devaccessd is the ledger's only
/// writer. (`audit --follow` waits for a seq with `AuditAppendSignal`, fed from the same place.)
public final class LedgerCommits: Sendable {
    /// A handle to stop observing.
    public struct Observation: Sendable, Hashable {
        fileprivate let id: UInt64
    }

    private struct State: Sendable {
        var nextID: UInt64 = 0
        var observers: [UInt64: @Sendable () -> Void] = [:]
    }

    private let state = Mutex(State())

    init() {}

    /// `body` is called after each commit, on the writing thread, while the writer waits
    /// for it: it must return quickly (signal an eventfd) and must not write to the ledger.
    public func observe(_ body: @escaping @Sendable () -> Void) -> Observation {
        state.withLock { state in
            defer { state.nextID &+= 1 }
            state.observers[state.nextID] = body
            return Observation(id: state.nextID)
        }
    }

    public func cancel(_ observation: Observation) {
        state.withLock { _ = $0.observers.removeValue(forKey: observation.id) }
    }

    func committed() {
        for observer in state.withLock({ Array($0.observers.values) }) { observer() }
    }
}
