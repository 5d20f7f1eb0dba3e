import FoundationEssentials
import Glibc
import DevAccessSystem
import Dispatch
import Synchronization

/// A few long-lived threads that run PAM conversations: PAM blocks (pam_unix may sleep
/// after a wrong password, a network backend may hang), so it must not run on the handler
/// threads, and a thread per check let one user's guesses grow the daemon without bound.
/// At most `queueLimit` checks wait for a thread; more are refused.
final class PamWorkers: Sendable {
    typealias Job = @Sendable () -> Void

    let threads: Int
    let queueLimit: Int
    private let queue: JobQueue

    init(threads: Int, queueLimit: Int) {
        self.threads = max(1, threads)
        self.queueLimit = max(1, queueLimit)
        queue = JobQueue()
    }

    deinit { queue.close(threads: threads) }

    /// Runs `job` on one of the threads (started on first use); false when `queueLimit`
    /// jobs wait already and `job` was not taken.
    func submit(_ job: @escaping Job) -> Bool {
        queue.push(job, limit: queueLimit, threads: threads)
    }
}

/// The jobs waiting for a PAM thread. Shared by the threads, so the pool can go away.
private final class JobQueue: Sendable {
    private struct State {
        var jobs: [(number: UInt64, job: PamWorkers.Job)] = []
        var numbered: UInt64 = 0
        var started = 0
        var closed = false
    }

    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)

    func push(_ job: @escaping PamWorkers.Job, limit: Int, threads: Int) -> Bool {
        let (taken, startThread, number) = state.withLock { state -> (Bool, Bool, UInt64) in
            guard !state.closed, state.jobs.count < limit else { return (false, false, 0) }
            state.numbered += 1
            state.jobs.append((state.numbered, job))
            // Threads start with the first jobs, up to `threads`, and then stay.
            let start = state.started < threads
            if start { state.started += 1 }
            return (true, start, state.numbered)
        }
        guard taken else { return false }
        if startThread {
            do throws(Errno) {
                try DetachedThread.start(name: "devaccessd pam") { [self] in
                    while let next = pop() { next() }
                }
            } catch {
                // No new thread: the job waits for one already started, or, with none, is refused.
                let refused = state.withLock { state -> Bool in
                    state.started -= 1
                    guard state.started == 0 else { return false }
                    state.jobs.removeAll { $0.number == number }
                    return true
                }
                if refused { return false }
            }
        }
        available.signal()
        return true
    }

    /// The next job, waiting for one; nil once the pool is gone.
    private func pop() -> PamWorkers.Job? {
        while true {
            available.wait()
            let (job, closed) = state.withLock { state -> (PamWorkers.Job?, Bool) in
                (state.jobs.isEmpty ? nil : state.jobs.removeFirst().job, state.closed)
            }
            if let job { return job }
            if closed { return nil }
        }
    }

    func close(threads: Int) {
        state.withLock { $0.closed = true }
        for _ in 0..<threads { available.signal() }
    }
}
