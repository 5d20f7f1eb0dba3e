import DevAccessSystem
import DevAccessPAM
import DevAccessEngine

/// Checks passwords through PAM for `auth_self`: on the PAM threads (PamWorkers), one
/// check per uid at a time, and no sooner than the uid's back-off allows (PasswordGate).
/// An answer waits for its turn at most `waitLimit`; past that it is refused, saying how
/// long to wait. Passwords are never logged.
final class PasswordChecks: Sendable {
    enum Outcome: Sendable, Equatable {
        case accepted
        /// Wrong password, unknown or locked user (pam_faillock too): the answer is no.
        case rejected
        /// PAM could not check (missing service file, broken stack): not the user's fault.
        case failed(String)
        /// Not checked: `failures` wrong passwords in a row, the next check no sooner than `wait`.
        case backingOff(Duration, failures: Int)
        /// Not checked: another check of this uid still runs, or too many wait for PAM.
        case busy(String)
    }

    /// The PAM service (/etc/pam.d/SERVICE).
    let service: String
    let gate: PasswordGate
    let workers: PamWorkers
    let waitLimit: Duration
    let log: BrokerLog

    init(settings: RequestSettings, log: BrokerLog) {
        service = settings.pamService
        gate = PasswordGate(first: settings.passwordBackoff, cap: settings.passwordBackoffCap)
        workers = PamWorkers(threads: settings.pamThreads, queueLimit: settings.pamQueueLimit)
        waitLimit = settings.passwordWaitLimit
        self.log = log
    }

    /// The back-off `uid` faces now (zero when none).
    func waiting(_ uid: UInt32) -> (wait: Duration, failures: Int) {
        gate.waiting(uid)
    }

    /// Checks `password` once it is `uid`'s turn. `wanted` is asked before the check
    /// starts: an answer whose requester has left is not checked.
    func check(uid: UInt32, user: String, password: String, wanted: @Sendable () -> Bool) async -> Outcome {
        let clock = ContinuousClock()
        let deadline = clock.now + waitLimit
        while true {
            guard wanted() else { return .busy("the requester left before its password was checked") }
            switch gate.take(uid) {
            case .go:
                let outcome = await run(user: user, password: password)
                switch outcome {
                case .accepted: gate.finish(uid, accepted: true)
                case .rejected: gate.finish(uid, accepted: false)
                default: gate.finish(uid, accepted: nil)
                }
                let next = gate.waiting(uid)
                log.info("password checked", ["uid": String(uid), "outcome": Self.word(outcome),
                                              "failures": String(next.failures),
                                              "next_check_in_sec": String(Self.seconds(next.wait))])
                return outcome
            case .inFlight:
                guard clock.now < deadline else {
                    return .busy("another password check of \(user) is still running")
                }
                try? await Task.sleep(for: .milliseconds(100))
            case .backingOff(let wait, let failures):
                guard clock.now + wait <= deadline else { return .backingOff(wait, failures: failures) }
                // In steps, so a requester that leaves frees its prompt (a per-user slot) soon.
                try? await Task.sleep(for: min(wait, .milliseconds(250)))
            }
        }
    }

    /// One PAM conversation on a PAM thread; `busy` when too many wait for one.
    private func run(user: String, password: String) async -> Outcome {
        let service = self.service
        let queueLimit = workers.queueLimit
        return await withCheckedContinuation { continuation in
            let taken = workers.submit {
                do throws(PasswordCheck.Failure) {
                    try PasswordCheck.verify(user: user, password: password, service: service)
                    continuation.resume(returning: .accepted)
                } catch {
                    continuation.resume(returning: error.isRejection ? .rejected : .failed(error.description))
                }
            }
            if !taken {
                continuation.resume(returning: .busy("\(queueLimit) password checks wait for PAM already"))
            }
        }
    }

    /// Whole seconds, rounded up: what a person is told to wait.
    static func seconds(_ duration: Duration) -> Int64 {
        ConsentPlan.wholeSeconds(duration)
    }

    static func word(_ outcome: Outcome) -> String {
        switch outcome {
        case .accepted: return "accepted"
        case .rejected: return "wrong-password"
        case .failed: return "pam-failed"
        case .backingOff: return "backing-off"
        case .busy: return "busy"
        }
    }
}
