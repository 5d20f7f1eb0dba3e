import Synchronization
import DevAccessCore
import DevAccessEnforcement

/// The policy as devaccessd applies it: read again for every request and engine run unless
/// inotify says the files are as they were when the kept one was read (PolicyFilesWatch;
/// an edit counts at once, no reload needed), but a file that stops parsing never leaves the
/// broker without a policy: the last one that parsed stays in force, and the log says
/// where the error is, once per distinct error. At start an invalid policy is refused
/// (Daemon). One keeper serves the requests and the engine, so both apply the same policy.
public final class PolicyKeeper: Sendable {
    public let directory: String
    private let log: BrokerLog
    private struct State {
        var lastGood: Policy?
        /// The policy read when `PolicyFilesWatch` gave this generation, and nothing changed since.
        var kept: (policy: Policy, generation: UInt64)?
        var told: String?
        /// The last reload found the files broken (a fix is then worth a line in the log).
        var reloadFailed = false
    }
    private let state: Mutex<State>
    private let reloadObservers = Mutex<[@Sendable () -> Void]>([])

    private let watch: PolicyFilesWatch
    /// How many times `current()` read the files (tests: what was kept was not read again).
    let reads = Atomic<Int>(0)

    /// `keeps` false (`DEVACCESSD_STATUS_CACHE=off`): the files are read for every use.
    /// `failWatchesWith` (DEBUG tests): no watch can be set, so nothing is kept.
    public init(directory: String, log: BrokerLog, initial: Policy? = nil, keeps: Bool = true,
                failWatchesWith: CInt? = nil) {
        self.directory = directory
        self.log = log
        watch = PolicyFilesWatch(directory: directory, keeps: keeps, failWatchesWith: failWatchesWith)
        state = Mutex(State(lastGood: initial, told: nil))
    }

    /// The policy to apply now: the kept one while the watch says no policy file, nor the
    /// directory, changed since it was read; else read (and kept when nothing changed
    /// during the read).
    public func current() -> PolicyReading {
        if let kept = state.withLock({ $0.kept }), watch.unchanged(since: kept.generation) {
            return .loaded(kept.policy)
        }
        let generation = watch.beginRead()
        reads.add(1, ordering: .relaxed)
        let reading = PolicyReading.read(directory: directory)
        let unchanged = generation.map { watch.unchanged(since: $0) } ?? false
        let (decided, tell): (PolicyReading, String?) = state.withLock { state in
            switch reading {
            case .loaded(let policy):
                let recovered = state.told != nil
                state.lastGood = policy
                state.kept = unchanged ? generation.map { (policy, $0) } : nil
                state.told = nil
                state.reloadFailed = false
                return (reading, recovered ? "" : nil)
            case .unreadable(let problem):
                state.kept = nil
                guard let lastGood = state.lastGood else { return (reading, nil) }
                let first = state.told != problem
                state.told = problem
                return (.loaded(lastGood), first ? problem : nil)
            }
        }
        if let tell {
            if tell.isEmpty {
                log.notice("the policy parses again and is in force", ["config_dir": directory])
            } else {
                log.error("the policy does not parse; the last policy that did stays in force until it is fixed",
                          ["error": tell, "config_dir": directory])
            }
        }
        return decided
    }

    /// What is wrong with the files while the last good policy is applied in their place
    /// (as `current()` last found them); nil while they parse.
    public var brokenFiles: String? {
        state.withLock { $0.lastGood == nil ? nil : $0.told }
    }

    /// `body` is called after each reload that loaded a policy (it may lower or end grants
    /// without the ledger changing); it must return quickly.
    public func observeReloads(_ body: @escaping @Sendable () -> Void) {
        reloadObservers.withLock { $0.append(body) }
    }

    /// SIGHUP, or a file of the configuration directory changed (`trigger`): read now and
    /// say what happened.
    public func reload(trigger: String = "SIGHUP") {
        switch PolicyReading.read(directory: directory) {
        case .loaded(let policy):
            let recovered = state.withLock { state in
                defer {
                    state.lastGood = policy
                    state.told = nil
                    state.reloadFailed = false
                }
                return state.told != nil || state.reloadFailed
            }
            if recovered { log.notice("the policy parses again and is in force", ["config_dir": directory]) }
            log.notice("policy reloaded", ["config_dir": directory, "rules": String(policy.rules.count),
                                           "trigger": trigger])
            for observer in reloadObservers.withLock({ $0 }) { observer() }
        case .unreadable(let problem):
            let kept = state.withLock { state in
                state.reloadFailed = true
                return state.lastGood != nil
            }
            log.error(kept ? "policy not reloaded: it does not parse; the last good policy stays in force"
                           : "policy not reloaded: it does not parse",
                      ["error": problem, "config_dir": directory, "trigger": trigger])
        }
    }
}
