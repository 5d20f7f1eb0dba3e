import FoundationEssentials
import Dispatch
import Glibc
import DevAccessSystem
import Synchronization

/// The threads request handlers run on: a task executor of its own, so handlers never
/// depend on the shared concurrency pool (one thread per core), which a blocking NSS
/// lookup, a ledger fsync or an embedding process could occupy. Every handler task
/// prefers this executor, and so do the tasks it creates.
final class HandlerExecutor: TaskExecutor, Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        var head = 0

        mutating func push(_ job: UnownedJob) { jobs.append(job) }

        mutating func pop() -> UnownedJob? {
            guard head < jobs.count else { return nil }
            let job = jobs[head]
            head += 1
            if head > 64 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }
    }

    private let queue = Mutex(Queue())
    private let ready = DispatchSemaphore(value: 0)

    init(threads: Int) {
        for index in 0..<max(1, threads) {
            DetachedThread.startOrExit(name: "devaccessd handler \(index)") { [self] in self.work() }
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.withLock { $0.push(job) }
        ready.signal()
    }

    private func work() {
        while true {
            ready.wait()
            guard let job = queue.withLock({ $0.pop() }) else { continue }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
