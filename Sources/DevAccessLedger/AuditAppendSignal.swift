import Synchronization

/// Wakes whoever waits for audit events newer than a seq as soon as this process appends
/// one. devaccessd is the ledger's one writer, so `audit --follow` through it is answered
/// when an event is written, not on the next poll. Appends by another process (none while
/// devaccessd runs; `--offline` refuses to run beside it) are not seen: the wait then ends
/// at its deadline, and the caller reads the ledger again either way.
public final class AuditAppendSignal: Sendable {
    private struct Waiter {
        var after: Int64
        var continuation: CheckedContinuation<Void, Never>
        /// Ends the wait at its deadline; cancelled when an append ends it first.
        var deadline: Task<Void, Never>?
    }

    private struct State {
        /// The newest seq this process appended (0: none yet).
        var newest: Int64 = 0
        var nextID = 0
        var waiters: [Int: Waiter] = [:]
    }

    private let state = Mutex(State())

    init() {}

    /// Called after a write that appended events through `seq` has committed.
    func appended(through seq: Int64) {
        let woken = state.withLock { state -> [Waiter] in
            state.newest = max(state.newest, seq)
            let ready = state.waiters.filter { $0.value.after < seq }
            for id in ready.keys { state.waiters[id] = nil }
            return Array(ready.values)
        }
        for waiter in woken {
            waiter.deadline?.cancel()
            waiter.continuation.resume()
        }
    }

    /// Returns when this process has appended an event with a seq above `after`, when
    /// `limit` has passed, or when the task is cancelled (the connection went away, the
    /// daemon stops), whichever is first.
    public func wait(after: Int64, limit: Duration) async {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let registered = state.withLock { state -> Bool in
                    // Already written (between the caller's read and now), or cancelled before registering.
                    guard state.newest <= after, !Task.isCancelled else { return false }
                    state.waiters[id] = Waiter(after: after, continuation: continuation, deadline: nil)
                    return true
                }
                guard registered else {
                    continuation.resume()
                    return
                }
                let deadline = Task { [weak self] in
                    // Cancelled when an append came first: the waiter is gone, wake finds nothing.
                    try? await Task.sleep(for: limit)
                    self?.wake(id)
                }
                let waiting = state.withLock { state -> Bool in
                    state.waiters[id]?.deadline = deadline
                    return state.waiters[id] != nil
                }
                if !waiting { deadline.cancel() }
            }
        } onCancel: {
            wake(id)
        }
    }

    /// Resumes one waiter if it is still waiting (each is resumed exactly once).
    private func wake(_ id: Int) {
        guard let waiter = state.withLock({ $0.waiters.removeValue(forKey: id) }) else { return }
        waiter.deadline?.cancel()
        waiter.continuation.resume()
    }
}
