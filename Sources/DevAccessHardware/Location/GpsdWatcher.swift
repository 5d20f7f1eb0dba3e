import CLinux
import Glibc
import FoundationEssentials
import Dispatch
import Synchronization
import DevAccessCore
import DevAccessSystem

/// The broker's standing connection to gpsd: one `?WATCH` stream, kept open on a thread
/// of its own and made again with exponential back-off whenever it ends, holding the
/// latest fix and satellite report of each receiver.
///
/// A thread and not a task: it blocks in poll(2) for as long as gpsd is quiet. `stop()`
/// wakes it through a socket pair that every wait also polls, so stopping takes no
/// longer than the thread needs to notice, whatever it was waiting for (except a host
/// name being resolved, which is looked at every 50 ms).
///
/// Each connection must begin with gpsd's VERSION banner and answer `?WATCH` with a
/// device list within `handshakeTimeout`; after that it may stay silent for as long as
/// gpsd likes (a gpsd without receivers says nothing). Anything that is not gpsd's
/// protocol (a line that is not JSON, a line over `maxLineLength`, a report that breaks
/// gpsd_json(5)) ends the connection with a problem saying so; nothing a peer sends
/// can crash the watcher or make it hold more than `maxLineLength` bytes of a line.
///
/// Readers never block the watcher: `snapshot()` copies the state under a lock, and
/// `waitForChange` / `waitForFix` sleep on a semaphore the watcher signals.
///
/// The thread holds the watcher until `stop()`: a started watcher that is dropped
/// without being stopped keeps watching.
public final class GpsdWatcher: Sendable {
    public static let defaultBackoff: (first: Duration, max: Duration) = (.milliseconds(250), .seconds(10))
    public static let defaultHandshakeTimeout: Duration = .seconds(2)

    public let endpoint: GpsdEndpoint
    public let maxLineLength: Int
    public let handshakeTimeout: Duration
    /// The first wait after a failed attempt, doubled after each further failure up to the
    /// second value; back to the first after a connection that lasted at least the second.
    public let backoff: (first: Duration, max: Duration)

    private let shared: Mutex<Shared>
    /// Held across start and stop, so a stop's join and the next start never interleave.
    private let lifecycle = Mutex<Run?>(nil)

    private struct Shared: Sendable {
        var model: GpsdWatchModel
        var handler: (@Sendable (GpsdWatchEvent) -> Void)?
        var waiters: [UInt64: DispatchSemaphore] = [:]
        var nextTicket: UInt64 = 0
        var observers: [UInt64: @Sendable () -> Void] = [:]
    }

    public init(endpoint: GpsdEndpoint, maxLineLength: Int = GpsdClient.defaultMaxLineLength,
                handshakeTimeout: Duration = GpsdWatcher.defaultHandshakeTimeout,
                backoff: (first: Duration, max: Duration) = GpsdWatcher.defaultBackoff) {
        self.endpoint = endpoint
        self.maxLineLength = maxLineLength
        self.handshakeTimeout = handshakeTimeout
        self.backoff = (max(backoff.first, .milliseconds(1)), max(backoff.max, backoff.first))
        shared = Mutex(Shared(model: GpsdWatchModel(endpoint: endpoint)))
    }

    // MARK: Reading the state

    public func snapshot() -> GpsdWatchState {
        shared.withLock { $0.model.state }
    }

    /// The fix to serve now (see `GpsdWatchState.bestFix`), or nil while there is none.
    public func bestFix() -> LocationFix? {
        shared.withLock { $0.model.state.bestFix }
    }

    /// The best fix, as soon as there is one with a position; nil when `timeout` passes first.
    public func waitForFix(timeout: Duration) -> LocationFix? {
        wait(timeout: timeout) { $0.bestFix }
    }

    /// The state once its generation is past `generation`; nil when `timeout` passes first.
    /// Pass the generation of the state last seen to get each change (changes that come
    /// while the caller is busy are seen together, as the latest state).
    public func waitForChange(after generation: UInt64, timeout: Duration) -> GpsdWatchState? {
        wait(timeout: timeout) { $0.generation > generation ? $0 : nil }
    }

    /// Called on the watcher's thread, in order, for each event; it must return quickly
    /// and must not call `start()` or `stop()` (they wait for this thread). Replaces any
    /// handler set before; nil removes it.
    public func setChangeHandler(_ handler: (@Sendable (GpsdWatchEvent) -> Void)?) {
        shared.withLock { $0.handler = handler }
    }

    /// `body` is called on the watcher's thread after each change of the state (each
    /// generation); like the change handler it must return quickly. Any number may observe:
    /// this is how a server learns of a fix without a thread waiting for it.
    public func observeChanges(_ body: @escaping @Sendable () -> Void) -> GpsdWatchObservation {
        shared.withLock { shared in
            defer { shared.nextTicket &+= 1 }
            shared.observers[shared.nextTicket] = body
            return GpsdWatchObservation(id: shared.nextTicket)
        }
    }

    public func cancel(_ observation: GpsdWatchObservation) {
        shared.withLock { _ = $0.observers.removeValue(forKey: observation.id) }
    }

    private func wait<T>(timeout: Duration, until found: (GpsdWatchState) -> T?) -> T? {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        let wakeUp = DispatchSemaphore(value: 0)
        while true {
            let (value, ticket) = shared.withLock { shared -> (T?, UInt64?) in
                if let value = found(shared.model.state) { return (value, nil) }
                let ticket = shared.nextTicket
                shared.nextTicket &+= 1
                shared.waiters[ticket] = wakeUp
                return (nil, ticket)
            }
            guard let ticket else { return value }
            let remaining = GpsdTime.milliseconds(ContinuousClock.now.duration(to: deadline))
            let outcome = remaining > 0 ? wakeUp.wait(timeout: .now() + .milliseconds(Int(remaining))) : .timedOut
            shared.withLock { _ = $0.waiters.removeValue(forKey: ticket) }
            if outcome == .timedOut { return shared.withLock { found($0.model.state) } }
        }
    }

    // MARK: Starting and stopping

    /// Starts watching on a new thread; does nothing when already started. Fails only
    /// when the process is out of descriptors for the wake-up socket pair.
    public func start() throws(GpsdWatcherError) {
        try lifecycle.withLock { current throws(GpsdWatcherError) in
            guard current == nil else { return }
            let run = try Run()
            do throws(Errno) {
                try DetachedThread.start(name: "devaccess gpsd") { [self] in
                    defer { run.finished.signal() }
                    loop(run)
                }
            } catch {
                throw GpsdWatcherError(systemCall: SystemCallError("pthread_create", error))
            }
            current = run
        }
    }

    /// Stops watching and returns once the thread has ended; the state is then
    /// disconnected with no receivers. Does nothing when not started. `start()` may
    /// be called again afterwards.
    public func stop() {
        lifecycle.withLock { current in
            guard let run = current else { return }
            current = nil
            run.requestStop()
            run.finished.wait()
            run.closeDescriptors()
        }
    }

    /// One start-to-stop span: its stop flag, its wake-up socket pair and its end.
    private final class Run: Sendable {
        let wakeReader: CInt
        let wakeWriter: CInt
        let stopping = Atomic<Bool>(false)
        let finished = DispatchSemaphore(value: 0)

        init() throws(GpsdWatcherError) {
            var pair: [CInt] = [-1, -1]
            let flags = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue)
            guard socketpair(AF_UNIX, flags, 0, &pair) == 0 else {
                throw GpsdWatcherError(systemCall: .current("socketpair"))
            }
            wakeReader = pair[0]
            wakeWriter = pair[1]
        }

        var stopRequested: Bool { stopping.load(ordering: .acquiring) }

        /// Sets the flag, then makes the reader readable for good (it is never drained),
        /// so every poll from now on returns at once.
        func requestStop() {
            stopping.store(true, ordering: .releasing)
            var byte: UInt8 = 1
            _ = Glibc.send(wakeWriter, &byte, 1, CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT))
        }

        func closeDescriptors() {
            _ = Glibc.close(wakeReader)
            _ = Glibc.close(wakeWriter)
        }
    }

    // MARK: The watcher's thread

    private func loop(_ run: Run) {
        var delay = backoff.first
        while !run.stopRequested {
            let began = ContinuousClock.now
            let (problem, streamed) = session(run)
            if run.stopRequested { break }
            publish { $0.disconnected(problem.description) }
            // A connection that lasted was gpsd working: start the back-off over.
            if streamed && ContinuousClock.now - began >= backoff.max { delay = backoff.first }
            sleep(delay, run)
            delay = min(delay * 2, backoff.max)
        }
        publish { $0.disconnected("devaccess stopped watching gpsd at \(endpoint)") }
    }

    /// One connection, from connect to its end; returns why it ended, and whether it got
    /// as far as the report stream.
    private func session(_ run: Run) -> (GpsdError, streamed: Bool) {
        var streamed = false
        do throws(GpsdError) {
            let handshake = ContinuousClock.now.advanced(by: handshakeTimeout)
            var connection = try GpsdConnection.open(endpoint, deadline: handshake, budget: handshakeTimeout,
                                                     maxLineLength: maxLineLength, wake: run.wakeReader)
            // Whoever listens on gpsd's port is served to every granted program: not a login
            // user's program (one can listen there while gpsd is down).
            if let owner = connection.peerOwner, TCPSocketOwner.isUserAccount(owner) {
                throw .untrusted(endpoint, uid: owner)
            }
            let version = try next(&connection, until: handshake, .banner).report.banner(from: endpoint)
            switch try connection.send(GpsdClient.watchCommand, until: handshake) {
            case .sent: break
            case .deadline: throw .noAnswer(endpoint, handshakeTimeout, .deviceList)
            case .closed: throw .closedEarly(endpoint, .deviceList)
            }
            publish { $0.connected(version) }
            // gpsd answers ?WATCH with DEVICES; reports before it are taken as they come.
            var listed = false
            while !listed {
                let (line, report) = try next(&connection, until: handshake, .deviceList)
                if case .devices = report { listed = true }
                try take(report, line)
            }
            streamed = true
            while true {
                // No deadline of its own: gpsd is silent while no receiver reports.
                switch try connection.nextLine(until: ContinuousClock.now.advanced(by: .seconds(3600))) {
                case .line(let line): try take(try GpsdReport.decode(line, from: endpoint), line)
                case .deadline: if run.stopRequested { return (.closed(endpoint), streamed) }
                case .closed: throw .closed(endpoint)
                }
            }
        } catch {
            return (error, streamed)
        }
    }

    private func next(_ connection: inout GpsdConnection, until deadline: ContinuousClock.Instant,
                      _ stage: GpsdError.Stage) throws(GpsdError) -> (line: [UInt8], report: GpsdReport) {
        switch try connection.nextLine(until: deadline) {
        case .line(let line): return (line, try GpsdReport.decode(line, from: endpoint))
        case .deadline: throw .noAnswer(endpoint, handshakeTimeout, stage)
        case .closed: throw .closedEarly(endpoint, stage)
        }
    }

    /// Applies one report; gpsd's ERROR ends the connection (it refused what we asked).
    private func take(_ report: GpsdReport, _ line: [UInt8]) throws(GpsdError) {
        if case .error(let message) = report { throw .gpsdError(endpoint, message) }
        let now = ContinuousClock.now
        publish { $0.apply(report, line: line, at: now) }
    }

    /// Changes the model under the lock, wakes the waiters when the generation moved, and
    /// hands the events to the handler outside the lock (only this thread changes the
    /// model, so they arrive in order).
    private func publish(_ change: (inout GpsdWatchModel) -> [GpsdWatchEvent]) {
        let (events, handler, observers) = shared.withLock {
            shared -> ([GpsdWatchEvent], (@Sendable (GpsdWatchEvent) -> Void)?, [@Sendable () -> Void]) in
            let generation = shared.model.state.generation
            let events = change(&shared.model)
            guard shared.model.state.generation != generation else { return (events, shared.handler, []) }
            for waiter in shared.waiters.values { waiter.signal() }
            return (events, shared.handler, Array(shared.observers.values))
        }
        for observer in observers { observer() }
        guard let handler else { return }
        for event in events { handler(event) }
    }

    /// Waits `delay`, or less when stop is requested.
    private func sleep(_ delay: Duration, _ run: Run) {
        let deadline = ContinuousClock.now.advanced(by: delay)
        while !run.stopRequested, ContinuousClock.now < deadline {
            _ = try? Poll.wait(for: .readable(run.wakeReader), until: deadline)
        }
    }
}

/// The watcher could not start.
public struct GpsdWatcherError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The call that failed (socketpair for the wake-up pair, pthread_create for the thread).
    public var systemCall: SystemCallError
    public var description: String { "cannot watch gpsd: \(systemCall)" }
}

/// A handle to stop observing a `GpsdWatcher`.
public struct GpsdWatchObservation: Sendable, Hashable {
    fileprivate let id: UInt64
}
