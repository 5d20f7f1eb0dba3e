import FoundationEssentials
import Dispatch
import Glibc
import DevAccessSystem
import Synchronization

/// Produces a value on a thread of its own, fresh for every caller yet shared by the
/// callers that ask together.
///
/// A caller joins the batch waiting for the *next* production, never one already
/// running, so every value it receives was produced entirely after it asked. Under load
/// one production answers everyone who asked while the previous one ran; idle, each
/// caller gets its own. The work (udev, ALSA, gpsd, SQLite) blocks, so it runs here and
/// never on the event loop or the handler threads.
final class Coalescer<Value: Sendable>: Sendable {
    typealias Delivery = @Sendable (Value) -> Void

    private let produce: @Sendable () -> Value
    private let waiting = Mutex<[Delivery]>([])
    private let demand = DispatchSemaphore(value: 0)

    init(name: String, produce: @escaping @Sendable () -> Value) {
        self.produce = produce
        DetachedThread.startOrExit(name: name) { [self] in self.loop() }
    }

    /// Calls `deliver` (on the producing thread) with the next value.
    func request(_ deliver: @escaping Delivery) {
        let first = waiting.withLock { list -> Bool in
            list.append(deliver)
            return list.count == 1
        }
        if first { demand.signal() }
    }

    private func loop() {
        while true {
            demand.wait()
            let batch = waiting.withLock { list -> [Delivery] in
                let taken = list
                list.removeAll()
                return taken
            }
            guard !batch.isEmpty else { continue }
            let value = produce()
            for deliver in batch { deliver(value) }
        }
    }
}

/// Collects `count` values delivered from any threads, then calls `completion` once.
final class Gather<Value: Sendable>: Sendable {
    private let state: Mutex<(values: [Value?], missing: Int)>
    private let completion: @Sendable ([Value]) -> Void

    init(count: Int, completion: @escaping @Sendable ([Value]) -> Void) {
        state = Mutex((Array(repeating: nil, count: count), count))
        self.completion = completion
        if count == 0 { completion([]) }
    }

    func deliver(_ index: Int, _ value: Value) {
        let complete = state.withLock { state -> [Value]? in
            guard state.values[index] == nil else { return nil }
            state.values[index] = value
            state.missing -= 1
            return state.missing == 0 ? state.values.compactMap { $0 } : nil
        }
        if let complete { completion(complete) }
    }
}
