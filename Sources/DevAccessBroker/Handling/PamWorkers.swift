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
        var jobs: [PamWorkers.Job] = []
        var started = 0
        var closed = false
    }

    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)

    func push(_ job: @escaping PamWorkers.Job, limit: Int, threads: Int) -> Bool {
        let (taken, startThread) = state.withLock { state -> (Bool, Bool) in
            guard !state.closed, state.jobs.count < limit else { return (false, false) }
            state.jobs.append(job)
            // Threads start with the first jobs, up to `threads`, and then stay.
            let start = state.started < threads
            if start { state.started += 1 }
            return (true, start)
        }
        guard taken else { return false }
        if startThread { startWorker() }
        available.signal()
        return true
    }

    /// Starts one of the threads. When none can be made now (a thread limit reached, maybe
    /// by a program a user runs under devaccessd), the jobs wait and it is tried again
    /// shortly: a job taken is never dropped, and never run on the caller's thread.
    private func startWorker() {
        do throws(Errno) {
            try DetachedThread.start(name: "devaccessd pam") { [self] in
                while let next = pop() { next() }
            }
        } catch {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in startWorker() }
        }
    }

    /// The next job, waiting for one; nil once the pool is gone.
    private func pop() -> PamWorkers.Job? {
        while true {
            available.wait()
            let (job, closed) = state.withLock { state -> (PamWorkers.Job?, Bool) in
                (state.jobs.isEmpty ? nil : state.jobs.removeFirst(), state.closed)
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
