import Glibc
import Testing
import DevAccessSystem
import DevAccessTestSupport

/// `Poll`: the one place with poll(2)'s deadline arithmetic and its EINTR retry.
@Suite(.serialized) struct PollTests {
    @Test func aDeadlineBecomesMillisecondsRoundedUp() {
        let now = ContinuousClock.now
        #expect(Poll.milliseconds(until: nil, now: now) == -1, "no deadline: wait without limit")
        #expect(Poll.milliseconds(until: now, now: now) == 0)
        #expect(Poll.milliseconds(until: now - .seconds(1), now: now) == 0, "past: do not wait")
        #expect(Poll.milliseconds(until: now + .microseconds(1), now: now) == 1, "a rest under 1 ms does not spin")
        #expect(Poll.milliseconds(until: now + .microseconds(1_200), now: now) == 2)
        #expect(Poll.milliseconds(until: now + .seconds(3), now: now) == 3000)
        #expect(Poll.milliseconds(until: now + .seconds(10_000_000), now: now) == CInt.max, "clamped, not trapped")
    }

    @Test func readinessAndTheDeadline() throws {
        var ends: [CInt] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let started = ContinuousClock.now
        #expect(try Poll.wait(for: .readable(ends[0]), until: started + .milliseconds(50)) == false)
        #expect(ContinuousClock.now - started >= .milliseconds(50), "the wait did not end before its deadline")
        #expect(!Poll.isReady(.readable(ends[0])))
        #expect(Poll.isReady(.writable(ends[1])))
        #expect(write(ends[1], "x", 1) == 1)
        let ready = try #require(try Poll.wait([.readable(ends[1]), .readable(ends[0])], until: nil))
        #expect(ready[0] == 0 && ready[1] & Int16(POLLIN) != 0, "\(ready)")
    }

    /// A signal that interrupts poll(2) (a handler installed without SA_RESTART, which poll
    /// ignores anyway) neither ends the wait early nor surfaces as an error.
    @Test func aSignalDoesNotEndTheWait() throws {
        var ends: [CInt] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let started = ContinuousClock.now
        let interrupted = try SignalInterruptions.interrupting {
            try Poll.wait(for: .readable(ends[0]), until: started + .milliseconds(300))
        }
        #expect(interrupted.handlerInstalled)
        #expect(interrupted.sent == 5, "the signals came while poll waited")
        #expect(interrupted.result == false)
        #expect(ContinuousClock.now - started >= .milliseconds(300), "interrupted, the wait went on to its deadline")
    }
}
