import Synchronization
import DevAccessCore
import DevAccessEnforcement

/// The policy as devaccessd applies it: read again for every request and engine run (an
/// edit counts at once, no reload needed), but a file that stops parsing never leaves the
/// broker without a policy: the last one that parsed stays in force, and the log says
/// where the error is, once per distinct error. At start an invalid policy is refused
/// (Daemon). One keeper serves the requests and the engine, so both apply the same policy.
public final class PolicyKeeper: Sendable {
    public let directory: String
    private let log: BrokerLog
    private struct State {
        var lastGood: Policy?
        var told: String?
        /// The last reload found the files broken (a fix is then worth a line in the log).
        var reloadFailed = false
    }
    private let state: Mutex<State>
    private let reloadObservers = Mutex<[@Sendable () -> Void]>([])

    public init(directory: String, log: BrokerLog, initial: Policy? = nil) {
        self.directory = directory
        self.log = log
        state = Mutex(State(lastGood: initial, told: nil))
    }

    /// The policy to apply now.
    public func current() -> PolicyReading {
        let reading = PolicyReading.read(directory: directory)
        let (decided, tell): (PolicyReading, String?) = state.withLock { state in
            switch reading {
            case .loaded(let policy):
                let recovered = state.told != nil
                state.lastGood = policy
                state.told = nil
                state.reloadFailed = false
                return (reading, recovered ? "" : nil)
            case .unreadable(let problem):
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
