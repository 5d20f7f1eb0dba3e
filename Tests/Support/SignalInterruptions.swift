import Foundation
import Glibc
import Synchronization

/// Interrupts a blocking call the way a signal does in devaccessd: SIGUSR2 with a handler
/// that does nothing, installed without SA_RESTART, sent to the calling thread five times,
/// 20 ms apart, from another thread while `body` runs. The previous handler comes back after.
public enum SignalInterruptions {
    public struct Outcome<Result> {
        public var result: Result
        /// sigaction(2) installed the handler.
        public var handlerInstalled: Bool
        /// How many of the five signals pthread_kill(3) sent before `body` returned.
        public var sent: Int
    }

    public static func interrupting<Result>(_ body: () throws -> Result) rethrows -> Outcome<Result> {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        var previous = sigaction()
        let installed = sigaction(SIGUSR2, &action, &previous) == 0
        defer { sigaction(SIGUSR2, &previous, nil) }
        let waiter = pthread_self()
        let sent = Atomic<Int>(0)
        Thread.detachNewThread {
            for _ in 0..<5 {
                usleep(20_000)
                if pthread_kill(waiter, SIGUSR2) == 0 { sent.add(1, ordering: .sequentiallyConsistent) }
            }
        }
        let result = try body()
        return Outcome(result: result, handlerInstalled: installed, sent: sent.load(ordering: .sequentiallyConsistent))
    }
}
