import FoundationEssentials
import Dispatch
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement

/// Why a decision could not be enforced.
public enum DecisionEnforcementFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The engine failed (the ledger, mostly); its own case says what to do.
    case engine(EnforcementError)
    /// Nothing runs engine operations any more (the daemon is stopping).
    case unavailable(String)

    public var description: String {
        switch self {
        case .engine(let error): return error.description
        case .unavailable(let why): return "enforcement is not available: \(why)"
        }
    }
}

/// Where the broker's decisions are written and enforced: one engine operation at a time,
/// never two runs editing the same node at once. The daemon's live enforcement (hotplug,
/// expiry timers) should be the one implementation, so that its runs and the broker's
/// decisions share one queue; `SerialEnforcement` serves when none is given.
public protocol DecisionEnforcement: Sendable {
    /// Runs `body` with the engine after the operations queued before it. `body` returns
    /// its value and the report of the engine run it made (for logs).
    func perform<R: Sendable>(_ operation: String,
                              _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport))
        async throws(DecisionEnforcementFailure) -> R

    /// Grants whose ending (a revoke, deny or reset) the ledger could not record yet
    /// (`UnrecordedEndings`): their rows still stand, but their access has ended, so
    /// nothing may be served from them (`open`).
    var withheldGrants: Set<Int64> { get }
}

/// A thread of its own that runs engine operations in order. Handler threads hand work
/// to it and wait without blocking (a continuation), so a slow ACL edit or ledger fsync
/// never holds a handler thread.
public final class SerialEnforcement: DecisionEnforcement {
    private let enforcer: Enforcer
    private let jobs = Mutex<[@Sendable () -> Void]>([])
    private let ready = DispatchSemaphore(value: 0)

    public init(enforcer: Enforcer) {
        self.enforcer = enforcer
        DetachedThread.startOrExit(name: "devaccessd decisions") { [self] in self.loop() }
    }

    public func perform<R: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport)
    ) async throws(DecisionEnforcementFailure) -> R {
        let enforcer = self.enforcer
        let result: Result<R, DecisionEnforcementFailure> = await withCheckedContinuation { continuation in
            let job: @Sendable () -> Void = {
                let outcome = Result { () throws(EnforcementError) -> (R, EnforcementReport) in try body(enforcer) }
                continuation.resume(returning: outcome.map(\.0).mapError { .engine($0) })
            }
            jobs.withLock { $0.append(job) }
            ready.signal()
        }
        return try result.get()
    }

    public var withheldGrants: Set<Int64> { enforcer.unrecorded.withheld }

    private func loop() {
        while true {
            ready.wait()
            let job = jobs.withLock { list -> (@Sendable () -> Void)? in list.isEmpty ? nil : list.removeFirst() }
            job?()
        }
    }
}

/// The broker's probes as the engine's device source: the same adapters status uses,
/// asked directly (the engine needs the devices as they are when it runs).
struct ProbeDeviceSource: DeviceSource {
    let probe: FreshProbe.Probe

    func report(for permission: Permission) -> AdapterReport {
        probe(permission)
    }
}
