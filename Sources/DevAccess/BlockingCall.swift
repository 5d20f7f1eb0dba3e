import FoundationEssentials
import Dispatch
import Glibc
import Synchronization
import DevAccessSystem

/// Lets a task's cancellation reach a call blocked in the protocol client on another
/// thread: cancelling shuts the call's socket down, which wakes its `poll(2)` at once;
/// devaccessd sees the connection end (a prompt it had open closes).
final class CallCancellation: Sendable {
    private struct State {
        var cancelled = false
        var socket: CInt?
        /// A pipe whose read end becomes readable at cancellation (`wakeDescriptor`).
        var wake: (read: CInt, write: CInt)?
    }

    private let state = Mutex(State())
    /// Wakes `sleep(for:)` when the call is cancelled (signalled once per cancel; a sleep
    /// that finds it signalled is one after the cancel, which returns at once anyway).
    private let wakeup = DispatchSemaphore(value: 0)

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// The socket the call blocks on now; shut down at once if the task is already cancelled.
    func attach(_ socket: CInt) {
        let cancelled = state.withLock { state -> Bool in
            state.socket = socket
            return state.cancelled
        }
        if cancelled { _ = shutdown(socket, CInt(SHUT_RDWR)) }
    }

    /// Before the socket is closed: a late cancellation must not shut down whatever file
    /// gets the same descriptor number next.
    func detach() {
        state.withLock { $0.socket = nil }
    }

    /// A descriptor that becomes readable when the call is cancelled, for a call that must
    /// finish an exchange before it lets go (a request learns whether it was queued); nil
    /// when no pipe can be made.
    func wakeDescriptor() -> CInt? {
        state.withLock { state -> CInt? in
            if let wake = state.wake { return wake.read }
            var ends: [CInt] = [-1, -1]
            guard pipe(&ends) == 0 else { return nil }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            state.wake = (ends[0], ends[1])
            if state.cancelled { _ = write(ends[1], "x", 1) }
            return ends[0]
        }
    }

    deinit {
        state.withLock { state in
            if let wake = state.wake {
                _ = close(wake.read)
                _ = close(wake.write)
            }
        }
    }

    func cancel() {
        state.withLock { state in
            guard !state.cancelled else { return }
            state.cancelled = true
            // Under the lock, so `detach` (and the close after it) cannot come in between.
            if let socket = state.socket { _ = shutdown(socket, CInt(SHUT_RDWR)) }
            if let wake = state.wake { _ = write(wake.write, "x", 1) }
        }
        wakeup.signal()
    }

    /// Waits `duration` unless cancelled first; false when cancelled.
    func sleep(for duration: Duration) -> Bool {
        guard !isCancelled else { return false }
        let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
        _ = wakeup.wait(timeout: .now() + .nanoseconds(Int(clamping: max(0, nanoseconds))))
        return !isCancelled
    }
}

/// Runs `body`, which blocks on devaccessd's socket, on a thread of its own (never on the
/// cooperative pool, which a wait for a person would starve), and makes the calling
/// task's cancellation wake it.
func offload<Value: Sendable>(
    _ body: @escaping @Sendable (CallCancellation) throws(DeviceAccessError) -> Value
) async throws(DeviceAccessError) -> Value {
    let cancellation = CallCancellation()
    let result: Result<Value, DeviceAccessError> = await withTaskCancellationHandler {
        await DetachedThread.run(name: "DevAccess call") { () -> Result<Value, DeviceAccessError> in
            do throws(DeviceAccessError) {
                return .success(try body(cancellation))
            } catch {
                return .failure(error)
            }
        }
    } onCancel: {
        cancellation.cancel()
    }
    return try result.get()
}
