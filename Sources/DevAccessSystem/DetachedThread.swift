import Glibc
import CLinux

/// A thread of its own for work that blocks (waiting for a process, sleeping out a grace
/// period), so it never holds one of the few threads Swift's cooperative pool has.
/// pthreads directly: Foundation's `Thread` would link Foundation into every executable.
public enum DetachedThread {
    private final class Work {
        let name: String?
        let body: @Sendable () -> Void
        init(_ name: String?, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }

    /// Runs `body` on a new detached thread. When no thread can be made (EAGAIN: the user's
    /// or the system's thread limit), runs it on the calling thread rather than dropping it.
    /// `name` (at most 15 bytes are kept) is what `ps -T` and a debugger show.
    public static func start(name: String? = nil, _ body: @escaping @Sendable () -> Void) {
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
        if started != 0 {
            Unmanaged<Work>.fromOpaque(work).takeRetainedValue().body()
        }
    }
}
