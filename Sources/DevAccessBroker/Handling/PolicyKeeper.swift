import Synchronization
import DevAccessCore
import DevAccessEnforcement

/// The policy as devaccessd applies it: read again for every request (an edit counts at
/// once, no reload needed), but a file that stops parsing never leaves the broker
/// without a policy: the last one that parsed stays in force, and the log says where the
/// error is, once per distinct error. At start an invalid policy is refused (Daemon).
final class PolicyKeeper: Sendable {
    let directory: String
    private let log: BrokerLog
    private struct State {
        var lastGood: Policy?
        var told: String?
    }
    private let state: Mutex<State>

    init(directory: String, log: BrokerLog, initial: Policy? = nil) {
        self.directory = directory
        self.log = log
        state = Mutex(State(lastGood: initial, told: nil))
    }

    /// The policy to apply now.
    func current() -> PolicyReading {
        let reading = PolicyReading.read(directory: directory)
        let (decided, tell): (PolicyReading, String?) = state.withLock { state in
            switch reading {
            case .loaded(let policy):
                let recovered = state.told != nil
                state.lastGood = policy
                state.told = nil
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

    /// SIGHUP: read now and say what happened.
    func reload() {
        switch PolicyReading.read(directory: directory) {
        case .loaded(let policy):
            state.withLock { state in
                state.lastGood = policy
                state.told = nil
            }
            log.notice("policy reloaded", ["config_dir": directory, "rules": String(policy.rules.count)])
        case .unreadable(let problem):
            let kept = state.withLock { $0.lastGood != nil }
            log.error(kept ? "policy not reloaded: it does not parse; the last good policy stays in force"
                           : "policy not reloaded: it does not parse", ["error": problem, "config_dir": directory])
        }
    }
}
