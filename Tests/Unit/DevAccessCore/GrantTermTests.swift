import Testing
@testable import DevAccessCore

/// The one term: how it is spelled, and what the policy's Keep= and MaxDuration= make of it.
@Suite("Grant terms")
struct GrantTermTests {
    static let hour: Int64 = 3600

    // MARK: words

    @Test func aTermIsWrittenAsTheProtocolsWordWithSecondsForAFor() {
        #expect(GrantTerm.Word.allCases.map(\.rawValue) == ["once", "for", "always"])
        #expect(GrantTerm.once.word == .once && GrantTerm.once.seconds == nil)
        #expect(GrantTerm.always.word == .always && GrantTerm.always.seconds == nil)
        #expect(GrantTerm.duration(seconds: 600).word == .duration && GrantTerm.duration(seconds: 600).seconds == 600)
        for term in [GrantTerm.once, .always, .duration(seconds: 1), .duration(seconds: GrantTerm.maxDurationSeconds)] {
            #expect(GrantTerm(word: term.word, seconds: term.seconds) == term)
        }
    }

    @Test func secondsGoWithForAndOnlyWithIt() {
        #expect(GrantTerm(word: .duration, seconds: nil) == nil)
        #expect(GrantTerm(word: .duration, seconds: 0) == nil)
        #expect(GrantTerm(word: .duration, seconds: -5) == nil)
        #expect(GrantTerm(word: .once, seconds: 60) == nil)
        #expect(GrantTerm(word: .always, seconds: 60) == nil)
    }

    // MARK: resolve (Keep=)

    @Test func theRequestedTermWinsOverKeep() {
        #expect(ResolvedTerm.resolve(.once, keepSeconds: 900, maxDurationSeconds: nil) == ResolvedTerm(.once))
        #expect(ResolvedTerm.resolve(.always, keepSeconds: 900, maxDurationSeconds: nil) == ResolvedTerm(.always))
        #expect(ResolvedTerm.resolve(.duration(seconds: 60), keepSeconds: 900, maxDurationSeconds: nil)
            == ResolvedTerm(.duration(seconds: 60)))
    }

    @Test func noTermAsksForKeepElseOnce() {
        #expect(ResolvedTerm.resolve(nil, keepSeconds: 900, maxDurationSeconds: nil) == ResolvedTerm(.duration(seconds: 900)))
        #expect(ResolvedTerm.resolve(nil, keepSeconds: nil, maxDurationSeconds: nil) == ResolvedTerm(.once))
    }

    @Test func aPolicyDecisionResolvesWithItsOwnKeepAndMaxDuration() {
        let decision = PolicyDecision(action: .ask, maxDurationSeconds: 8 * Self.hour, keepSeconds: 15 * 60, origin: nil)
        #expect(decision.term(nil) == ResolvedTerm(.duration(seconds: 900)))
        #expect(decision.term(.always) == ResolvedTerm(.duration(seconds: 8 * Self.hour), cap: 8 * Self.hour))
    }

    // MARK: cap (MaxDuration=)

    @Test(arguments: [Int64?.none, 0, -1, Int64.min])
    func noPositiveMaxDurationLeavesEveryTermAsItIs(maximum: Int64?) {
        for term in [GrantTerm.once, .always, .duration(seconds: 10 * 366 * 86_400)] {
            #expect(ResolvedTerm(term).capped(maximum) == ResolvedTerm(term))
        }
        #expect(ResolvedTerm.resolve(nil, keepSeconds: nil, maxDurationSeconds: maximum) == ResolvedTerm(.once))
    }

    @Test func onceKeepsItsProcessAndEndsAtMaxDurationAtTheLatest() {
        let once = ResolvedTerm(.once).capped(8 * Self.hour)
        #expect(once == ResolvedTerm(.once, cap: 8 * Self.hour))
        // Capped again: the shorter limit holds, whichever comes first.
        #expect(once.capped(Self.hour) == ResolvedTerm(.once, cap: Self.hour))
        #expect(once.capped(24 * Self.hour) == once)
    }

    @Test func alwaysUnderMaxDurationBecomesTheLongestTimeAndSaysSo() {
        let capped = ResolvedTerm.resolve(.always, keepSeconds: nil, maxDurationSeconds: 8 * Self.hour)
        #expect(capped == ResolvedTerm(.duration(seconds: 8 * Self.hour), cap: 8 * Self.hour))
        #expect(capped.text() == "for 8h (the longest the policy allows)")
    }

    @Test func aForIsShortenedOnlyWhenLongerThanMaxDuration() {
        let maximum = 8 * Self.hour
        #expect(ResolvedTerm(.duration(seconds: Self.hour)).capped(maximum) == ResolvedTerm(.duration(seconds: Self.hour)))
        #expect(ResolvedTerm(.duration(seconds: maximum)).capped(maximum) == ResolvedTerm(.duration(seconds: maximum)),
                "as long as allowed is not shortened")
        #expect(ResolvedTerm(.duration(seconds: maximum + 1)).capped(maximum)
            == ResolvedTerm(.duration(seconds: maximum), cap: maximum))
        // Keep= longer than MaxDuration= is capped like a requested `for`.
        #expect(ResolvedTerm.resolve(nil, keepSeconds: 24 * Self.hour, maxDurationSeconds: maximum)
            == ResolvedTerm(.duration(seconds: maximum), cap: maximum))
    }

    // MARK: text

    @Test func theTextSaysTheTermAndWhatThePolicyDid() {
        #expect(ResolvedTerm(.once).text() == "once (while the program that asked runs)")
        #expect(ResolvedTerm(.once).text(holder: "bash (pid 812)") == "once (while bash (pid 812) runs)")
        #expect(ResolvedTerm(.once).capped(8 * Self.hour).text(holder: "bash (pid 812)")
            == "once (while bash (pid 812) runs, at most 8h)")
        #expect(ResolvedTerm(.duration(seconds: 5400)).text() == "for 1h30m")
        #expect(ResolvedTerm(.always).text() == "always")
    }

    /// Issue 31: a `once` grant of the shell a person typed `devaccess request` in lasts until
    /// that shell closes, and says so: "once" reads as a single use.
    @Test func onceForAShellSaysUntilYouCloseThisShell() {
        #expect(ResolvedTerm(.once).text(holder: "/usr/bin/bash (pid 812)", shell: true)
            == "until you close this shell, /usr/bin/bash (pid 812)")
        #expect(ResolvedTerm(.once).capped(8 * Self.hour).text(holder: "/usr/bin/bash (pid 812)", shell: true)
            == "until you close this shell, /usr/bin/bash (pid 812), at most 8h")
        #expect(ResolvedTerm(.once).text(holder: nil, shell: true) == "until you close this shell")
    }
}
