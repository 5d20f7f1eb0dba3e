import Testing
@testable import DevAccessBroker

/// The back-off arithmetic, without a daemon.
struct PasswordGateTests {
    @Test func eachWrongPasswordDoublesTheWaitUpToTheCapAndARightOneEndsIt() {
        let gate = PasswordGate(first: .seconds(1), cap: .seconds(8))
        let start = ContinuousClock.now
        #expect(gate.take(1000, now: start) == .go)
        #expect(gate.take(1000, now: start) == .inFlight, "one check per uid at a time")
        #expect(gate.take(1001, now: start) == .go, "another user is not held back")
        gate.finish(1001, accepted: true, now: start)
        var now = start
        var waits: [Duration] = []
        for _ in 0..<6 {
            gate.finish(1000, accepted: false, now: now)
            guard case .backingOff(let wait, _) = gate.take(1000, now: now) else {
                Issue.record("no back-off after a wrong password")
                return
            }
            waits.append(wait)
            now += wait
            #expect(gate.take(1000, now: now) == .go)
        }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(8), .seconds(8)])
        gate.finish(1000, accepted: true, now: now)
        #expect(gate.take(1000, now: now) == .go, "a right password resets the back-off")
        gate.finish(1000, accepted: false, now: now)
        #expect(gate.take(1000, now: now + .milliseconds(500)) == .backingOff(.milliseconds(500), failures: 1))
    }
}
