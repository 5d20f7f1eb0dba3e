import Testing
import DevAccessCore
import DevAccessEngine
@testable import DevAccessBroker

/// A program its user can change gets a run-only (`once`) grant, whatever term was chosen:
/// that grant still ends when the chosen term or MaxDuration= would have (hostile review:
/// `devaccess run ./myloop.sh` under MaxDuration=1h held the camera for as long as the
/// script ran).
@Suite struct RunTermLimitTests {
    @Test func aRunOnlyGrantEndsWhenTheChosenTermOrThePolicysCapWould() {
        // "Allow for 10m" at a prompt: the run's grant lasts at most 10 minutes.
        #expect(RunPlan.runLimit(ResolvedTerm(.duration(seconds: 600))) == 600)
        // `always` under MaxDuration=1h: at most an hour.
        #expect(RunPlan.runLimit(ResolvedTerm.resolve(.always, keepSeconds: nil, maxDurationSeconds: 3600)) == 3600)
        // `for 8h` capped by MaxDuration=1h: an hour.
        #expect(RunPlan.runLimit(ResolvedTerm.resolve(.duration(seconds: 8 * 3600), keepSeconds: nil,
                                                      maxDurationSeconds: 3600)) == 3600)
        // `once` under MaxDuration=: the cap; with no cap, while the run lasts.
        #expect(RunPlan.runLimit(ResolvedTerm.resolve(.once, keepSeconds: nil, maxDurationSeconds: 900)) == 900)
        #expect(RunPlan.runLimit(ResolvedTerm(.once)) == nil)
        #expect(RunPlan.runLimit(ResolvedTerm(.always)) == nil)
    }
}
