import FoundationEssentials
import Dispatch
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessHardware
import DevAccessEnforcement

/// What an engine operation returns, seen by the worker that logs it: every operation
/// carries the report of the run it made.
public protocol EnforcementOutcome: Sendable {
    var enforcementReport: EnforcementReport { get }
}

extension EnforcementReport: EnforcementOutcome {
    public var enforcementReport: EnforcementReport { self }
}

extension Enforcer.DecisionOutcome: EnforcementOutcome {
    public var enforcementReport: EnforcementReport { report }
}

extension Enforcer.RevokeOutcome: EnforcementOutcome {
    public var enforcementReport: EnforcementReport { report }
}

extension Enforcer.ResetOutcome: EnforcementOutcome {
    public var enforcementReport: EnforcementReport { report }
}

/// Keeps the machine in line with the ledger while devaccessd runs (devaccessd(8), LIVE
/// ENFORCEMENT). One worker thread owns the `Enforcer` and runs one engine operation at
/// a time, so two runs never edit the same node at once. It runs:
/// - at start-up, a full reconcile before the daemon reports READY=1 (grants that ran
///   out while the daemon was down are ended and their entries removed);
/// - on every udev event of a capture subsystem: a pass over that node's device only
///   (`Enforcer.applyNodes`), not a full reconcile; the events that arrived meanwhile are
///   taken together, repeats of one node's event coalesce, and past
///   `maxPendingNodeEvents` distinct ones a full reconcile runs instead;
/// - when the next grant runs out: a `timerfd` armed for that instant (wall clock,
///   re-armed when the clock is set), recomputed after every run and whenever the
///   ledger file changes (the root CLI may add a grant behind the daemon's back);
/// - when a file of the policy's directory changes (inotify): the policy is reloaded
///   (the last good one kept when it does not parse) and applied;
/// - every `reconcileInterval` as a safety net for missed events (udev's netlink buffer
///   can overflow; logind rewrites ACLs on seat changes without an event of ours);
/// - for operations handed to `perform` (decisions made through the broker).
/// Root CLI commands may run at the same time in other processes: SQLite orders the
/// writes, and every run converges from whatever state it finds.
public final class LiveEnforcer: Sendable {
    public struct Options: Sendable {
        /// Period of the safety reconcile; nil: none.
        public var reconcileInterval: Duration?
        /// udev subsystems whose node events trigger a run; empty: no udev monitor.
        public var udevSubsystems: [String]
        /// The ledger's directory, watched for commits by other processes.
        public var ledgerDirectory: String?
        /// Directory -> node names to watch with inotify (declared test nodes, which
        /// have no udev events). Empty in production.
        public var nodeDirectories: [String: Set<String>]
        /// The policy's directory (devaccess.conf, conf.d/*.conf), watched with inotify:
        /// on a change `reloadPolicy` runs (it reads and logs), then a reconcile applies it.
        public var policyDirectory: String?
        public var reloadPolicy: (@Sendable (_ trigger: String) -> Void)?

        public init(reconcileInterval: Duration? = .seconds(60), udevSubsystems: [String] = LiveEnforcer.subsystems,
                    ledgerDirectory: String? = nil, nodeDirectories: [String: Set<String>] = [:],
                    policyDirectory: String? = nil, reloadPolicy: (@Sendable (_ trigger: String) -> Void)? = nil) {
            self.reconcileInterval = reconcileInterval
            self.udevSubsystems = udevSubsystems
            self.ledgerDirectory = ledgerDirectory
            self.nodeDirectories = nodeDirectories
            self.policyDirectory = policyDirectory
            self.reloadPolicy = reloadPolicy
        }
    }

    /// The subsystems of node-gated permissions. Location is not among them: users get it
    /// from devaccessd, so a receiver's node gets no entry (the engine notes that).
    public static let subsystems = ["video4linux", "sound"]
    static let subsystemPermissions: [String: Permission] = ["video4linux": .camera, "sound": .microphone]

    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        case engine(EnforcementError)
        /// The daemon is stopping; the operation did not run.
        case stopped

        public var description: String {
            switch self {
            case .engine(let error): return error.description
            case .stopped: return "the broker is shutting down; nothing was changed"
            }
        }
    }

    public let enforcer: Enforcer
    public let options: Options
    let log: BrokerLog
    private let mailbox = Mutex(Mailbox())
    let wakeDescriptor: CInt
    /// The eventfd, owned here: closed when the enforcer goes.
    private let wakeOwner: FileDescriptor
    private let finished = DispatchSemaphore(value: 0)
    private let udev = UdevWatch()
    private let phase = Mutex(Phase.new)
    /// Told after every run, with what caused it (status subscriptions fan out from here).
    private let observers = Mutex<[@Sendable (String) -> Void]>([])
    /// Told after every hotplug pass, with its nodes (`observeNodes`).
    private let nodeObservers = Mutex<[@Sendable (NodesApplied) -> Void]>([])
    /// Distinct node events waiting at most; past it the queue is dropped for a full reconcile.
    static let maxPendingNodeEvents = 1024

    enum Phase {
        case new, running, stopped
    }

    /// A queued operation: `run` does it and answers its caller, then returns the report
    /// for the log; `abandon` answers the caller when it will never run.
    struct Job: Sendable {
        var name: String
        var run: @Sendable (Enforcer) -> Result<EnforcementReport, EnforcementError>
        var abandon: @Sendable () -> Void
    }

    struct Mailbox {
        var jobs: [Job] = []
        var triggers: [String] = []
        var hotplug = NodeEventQueue(limit: LiveEnforcer.maxPendingNodeEvents)
        var stopping = false
        /// The most node events that ever waited at once (tests: the queue stays bounded).
        var hotplugHighWater = 0
    }

    public init(enforcer: Enforcer, log: BrokerLog, options: Options = Options()) throws(Errno) {
        self.enforcer = enforcer
        self.log = log
        self.options = options
        wakeOwner = FileDescriptor(owning: try Socket.makeEventFD())
        wakeDescriptor = wakeOwner.rawValue
    }

    /// Calls `observer` on the worker thread after each run (an operation handed to
    /// `perform`, or a reconcile for hotplug, expiry, policy, process exit, ...) with its
    /// causes, comma-separated. It must not block: the next run waits for it.
    public func observe(_ observer: @escaping @Sendable (String) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    func ran(_ causes: [String]) {
        guard !causes.isEmpty else { return }
        let label = causes.joined(separator: ",")
        for observer in observers.withLock({ $0 }) { observer(label) }
    }

    /// THE hook for hotplug: calls `observer` on the worker thread after each pass a node
    /// event caused (udev's, or a declared test node's directory event), with the nodes the
    /// events named and those whose ACL the pass changed, or `full` when the events were too
    /// many and a full reconcile ran instead. Called whether or not anything changed (a new
    /// device is news even when no grant concerns it). It must not block: the next run
    /// waits for it.
    public func observeNodes(_ observer: @escaping @Sendable (NodesApplied) -> Void) {
        nodeObservers.withLock { $0.append(observer) }
    }

    func nodesApplied(_ applied: NodesApplied) {
        for observer in nodeObservers.withLock({ $0 }) { observer(applied) }
    }

    /// Hands a node event to the worker (the udev thread calls this; tests too).
    func deliver(_ event: HotplugEvent) {
        let accepted = mailbox.withLock { box -> Bool in
            guard !box.stopping else { return false }
            box.hotplug.add(event)
            box.hotplugHighWater = max(box.hotplugHighWater, box.hotplug.count)
            return true
        }
        if accepted { wake() }
    }

    /// Node events waiting for the worker now, and the most that ever waited.
    var pendingNodeEvents: Int { mailbox.withLock { $0.hotplug.count } }
    var pendingNodeEventsHighWater: Int { mailbox.withLock { $0.hotplugHighWater } }

    /// Starts listening (udev first, so nothing plugged meanwhile is missed), runs the
    /// start-up reconcile and returns when it is done; the worker then keeps going on its
    /// own thread until `stop()`. Once only.
    public func start() {
        let first = phase.withLock { phase -> Bool in
            guard phase == .new else { return false }
            phase = .running
            return true
        }
        guard first else { return }
        let listening = !options.udevSubsystems.isEmpty
            && udev.start(subsystems: options.udevSubsystems, log: log) { [self] event in deliver(event) }
        let startedUp = DispatchSemaphore(value: 0)
        DetachedThread.startOrExit(name: "devaccessd enforcement") { [self] in
            defer {
                abandonAll()
                finished.signal()
            }
            EnforcementWorker(owner: self, tracksHotplug: listening).run(startedUp: startedUp)
        }
        startedUp.wait()
    }

    /// Stops the worker after the run in progress and waits for it; queued operations
    /// fail with `.stopped`. Any thread; more than once is harmless.
    public func stop() {
        let running = phase.withLock { phase -> Bool in
            defer { phase = .stopped }
            return phase == .running
        }
        mailbox.withLock { $0.stopping = true }
        wake()
        udev.stop()
        guard running else {
            abandonAll()
            return
        }
        // A run holding the ledger waits at most its busy timeout (5 s); past that the
        // process exits around it, which every run survives (intent is written first).
        if finished.wait(timeout: .now() + .seconds(10)) == .timedOut {
            log.warning("the enforcement worker did not finish its run in 10 s; stopping without it")
        }
    }

    /// Runs `body` on the worker, after the operations queued before it, and re-arms the
    /// expiry timer afterwards. For decisions made through the broker.
    public func perform<R: EnforcementOutcome>(
        _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> R
    ) async throws(Failure) -> R {
        let result: Result<R, Failure> = await withCheckedContinuation { continuation in
            let job = Job(name: operation, run: { enforcer in
                let outcome = Result { () throws(EnforcementError) -> R in try body(enforcer) }
                continuation.resume(returning: outcome.mapError { Failure.engine($0) })
                return outcome.map(\.enforcementReport)
            }, abandon: {
                continuation.resume(returning: .failure(.stopped))
            })
            if !submit(job) { continuation.resume(returning: .failure(.stopped)) }
        }
        return try result.get()
    }

    /// Asks for a full reconcile soon (coalesced with others pending); `trigger` is logged.
    public func requestReconcile(trigger: String) {
        let accepted = mailbox.withLock { box -> Bool in
            guard !box.stopping else { return false }
            if !box.triggers.contains(trigger) { box.triggers.append(trigger) }
            return true
        }
        if accepted { wake() }
    }

    // MARK: - For the worker

    private func submit(_ job: Job) -> Bool {
        let accepted = mailbox.withLock { box -> Bool in
            guard !box.stopping else { return false }
            box.jobs.append(job)
            return true
        }
        if accepted { wake() }
        return accepted
    }

    func takeMailbox() -> Mailbox {
        mailbox.withLock { box in
            let taken = box
            box.jobs.removeAll()
            box.triggers.removeAll()
            box.hotplug = NodeEventQueue(limit: LiveEnforcer.maxPendingNodeEvents)
            return taken
        }
    }

    /// Refuses new work and answers what is queued: the worker is gone.
    private func abandonAll() {
        let jobs = mailbox.withLock { box -> [Job] in
            box.stopping = true
            let jobs = box.jobs
            box.jobs.removeAll()
            return jobs
        }
        for job in jobs { job.abandon() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeDescriptor, &one, MemoryLayout<UInt64>.size)
    }
}

/// The broker's decisions (request flow, approvals) go through the same worker as
/// hotplug, expiry and periodic runs: one queue, one engine run at a time, and the
/// expiry timer re-armed after each decision.
extension LiveEnforcer {
    public func perform<R: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport)
    ) async throws(DecisionEnforcementFailure) -> R {
        do throws(Failure) {
            let carried = try await perform(operation) { (engine: Enforcer) throws(EnforcementError) -> Carried<R> in
                let (value, report) = try body(engine)
                return Carried(value: value, enforcementReport: report)
            }
            return carried.value
        } catch {
            switch error {
            case .engine(let engineError): throw .engine(engineError)
            case .stopped: throw .unavailable(error.description)
            }
        }
    }

    public var withheldGrants: Set<Int64> { enforcer.unrecorded.withheld }
}

/// A decision's value with the report of its run, so the worker can log it.
struct Carried<Value: Sendable>: EnforcementOutcome {
    var value: Value
    var enforcementReport: EnforcementReport
}

/// What a hotplug pass was about, for `LiveEnforcer.observeNodes`.
public struct NodesApplied: Sendable, Hashable {
    /// The nodes the events named (sorted); empty when `full`.
    public var paths: [String]
    /// The permissions of their subsystems (every node-gated one for declared test nodes).
    public var permissions: Set<Permission>
    /// Nodes whose ACL the pass changed (entries added or removed, access taken or put back).
    public var changed: Set<String>
    /// The events were more than the queue keeps: a full reconcile ran for them.
    public var full: Bool
}

/// Node events waiting for the worker, in arrival order. An event for a node whose latest
/// waiting event has the same action adds nothing (it keeps the earlier arrival, for the
/// latency figure): a burst of `change` events for one node is one. Past `limit` distinct
/// events the queue keeps none and says `overflowed`, and a full reconcile covers them.
struct NodeEventQueue: Sendable {
    let limit: Int
    private(set) var events: [HotplugEvent] = []
    private var latest: [String: Int] = [:]
    private(set) var overflowed = false
    /// Events not kept since the overflow (the ones it dropped and every later one): the
    /// worker says how many when it resyncs from a full probe.
    private(set) var dropped = 0

    init(limit: Int) { self.limit = limit }

    var count: Int { events.count }
    var isEmpty: Bool { events.isEmpty && !overflowed }

    mutating func add(_ event: HotplugEvent) {
        guard !overflowed else {
            dropped += 1
            return
        }
        if let index = latest[event.devnode], events[index].action == event.action {
            events[index].seqnum = event.seqnum
            return
        }
        guard events.count < limit else {
            overflowed = true
            dropped = events.count + 1
            events = []
            latest = [:]
            return
        }
        latest[event.devnode] = events.count
        events.append(event)
    }
}
