import Glibc
import Dispatch
import CLinux

/// A thread of its own for work that blocks (waiting for a process, a person, a socket),
/// so it never holds one of the few threads Swift's cooperative pool has. pthreads
/// directly: Foundation's `Thread` would link Foundation into every executable.
///
/// When no thread can be made (EAGAIN: a thread limit reached, perhaps by a program a user
/// started under devaccessd), the body is never run on the caller's thread instead: a loop
/// run there would never return, and a blocking wait would hold a lock or a pool thread.
/// Each caller says what happens then: `start` throws, `run` tries again, and
/// `startOrExit` stops the process, for the loops without which it cannot work.
public enum DetachedThread {
    private final class Work {
        let name: String?
        let body: @Sendable () -> Void
        init(_ name: String?, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }

    /// Runs `body` on a new detached thread; throws pthread_create's error, and then `body`
    /// never runs. `name` (15 bytes are kept) is what `ps -T` and a debugger show.
    public static func start(name: String? = nil, _ body: @escaping @Sendable () -> Void) throws(Errno) {
        let work = Unmanaged.passRetained(Work(name, body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, CInt(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let started = pthread_create(&thread, &attributes, { context in
            guard let context else { return nil }
            let work = Unmanaged<Work>.fromOpaque(context).takeRetainedValue()
            if let name = work.name { _ = devaccess_set_thread_name(name) }
            work.body()
            return nil
        }, work)
        guard started == 0 else {
            Unmanaged<Work>.fromOpaque(work).release()
            throw Errno(rawValue: started)
        }
    }

    /// Runs the blocking `body` on a thread of its own and returns what it returns. When no
    /// thread can be made, waits `retry` (cancelled or not: the caller still needs the
    /// answer) and tries again.
    public static func run<Value: Sendable>(name: String? = nil, retry: Duration = .milliseconds(50),
                                            _ body: @escaping @Sendable () -> Value) async -> Value {
        while true {
            let started: Value? = await withCheckedContinuation { continuation in
                do throws(Errno) {
                    try start(name: name) { continuation.resume(returning: body()) }
                } catch {
                    continuation.resume(returning: nil)
                }
            }
            if let started { return started }
            let nanoseconds = retry.components.seconds * 1_000_000_000 + retry.components.attoseconds / 1_000_000_000
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds))) {
                    continuation.resume()
                }
            }
        }
    }

    /// For a loop the process cannot work without, started once when it starts: when no
    /// thread can be made, says so on standard error and exits (EX_OSERR) rather than run
    /// on half its threads; a service manager restarts it.
    public static func startOrExit(name: String, _ body: @escaping @Sendable () -> Void) {
        do throws(Errno) {
            try start(name: name, body)
        } catch {
            FileDescriptor.writeAll(2, "devaccess: cannot start the thread '\(name)': \(error); exiting\n")
            Glibc.exit(71)
        }
    }
}
