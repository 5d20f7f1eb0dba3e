import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessInterface
import DevAccessEngine

/// What an `ask` prompt offers (`ConsentPlan.askChoices`) and what the typed answer decides
/// (`ConsentPlan.decided`: the permissions it names, the term of the choice typed, a
/// coarser location level), built without a daemon or a terminal.
@Suite struct AskChoicesTests {
    static let now = 1_700_000_000.0

    @Test func withoutALimitOnceForTheDefaultTimeAlwaysAndDeny() {
        let choices = ConsentPlan.askChoices([PolicyDecision(action: .ask)], scope: nil, holder: "bash (pid 812)",
                                               now: Self.now)
        #expect(choices.map(\.choice) == [.allow(.once), .allow(.duration), .allow(.always), .deny])
        #expect(choices[0].label == "Allow once (while bash (pid 812) runs)")
        #expect(choices[1].duration == GrantTerm.defaultAskSeconds)
        #expect(choices[1].label.hasPrefix("Allow for 1h, until "))
        #expect(choices[3].label == "Deny (remembered: you are not asked again)")
    }

    /// Issue 31: asked from a shell, the first choice lasts until that shell closes, and says so.
    @Test func onceForAShellIsOfferedAsUntilYouCloseThisShell() {
        let choices = ConsentPlan.askChoices([PolicyDecision(action: .ask)], scope: nil,
                                             holder: "/usr/bin/bash (pid 812)", shell: true, now: Self.now)
        #expect(choices[0].choice == .allow(.once))
        #expect(choices[0].label == "Allow until you close this shell, /usr/bin/bash (pid 812)")
        let terms = ConsentPlan.passwordTerms([.camera], scope: nil, holder: "/usr/bin/bash (pid 812)", shell: true,
                                              policies: { _ in PolicyDecision(action: .authSelf) })
        #expect(terms.text == "until you close this shell, /usr/bin/bash (pid 812)")
    }

    @Test func maxDurationTakesAlwaysAwayAndCapsTheTimeOffered() {
        let capped = PolicyDecision(action: .ask, maxDurationSeconds: 1800)
        let choices = ConsentPlan.askChoices([PolicyDecision(action: .ask), capped], scope: .always, holder: nil,
                                               now: Self.now)
        #expect(choices.map(\.choice) == [.allow(.once), .allow(.duration), .deny])
        #expect(choices[1].duration == 1800)
        #expect(choices[1].label.hasPrefix("Allow for 30m (the longest the policy allows), until "))
        #expect(choices[0].label.hasSuffix(", at most 30m)"))
    }

    @Test func theTimeAskedForElseTheShortestKeep() {
        let keeps = [PolicyDecision(action: .ask, keepSeconds: 7200), PolicyDecision(action: .ask, keepSeconds: 900)]
        #expect(ConsentPlan.askChoices(keeps, scope: nil, holder: nil, now: Self.now)[1].duration == 900)
        #expect(ConsentPlan.askChoices(keeps, scope: .duration(seconds: 600), holder: nil,
                                         now: Self.now)[1].duration == 600)
    }

    @Test func theAnswerDecidesThePermissionsItNames() {
        let subject = Principal(uid: 4401, name: "carol")
        let policies: (Permission) -> PolicyDecision = { _ in PolicyDecision(action: .ask, maxDurationSeconds: 600) }
        let allow = PromptChoice(allow: .always, label: "Allow always")
        let plans = ConsentPlan.decided([.camera, .location], term: allow.term, level: .city, policies: policies,
                                        subject: subject)
        #expect(plans.map(\.permission) == [.camera, .location])
        #expect(plans.allSatisfy { $0.decision == .allow && $0.method == .consent && $0.decidedBy == subject })
        // `always` under MaxDuration=10m is recorded for 10 minutes.
        #expect(plans.first?.term == ResolvedTerm(.duration(seconds: 600), cap: 600))
        #expect(plans.map(\.accuracy) == [nil, .city])
        let deny = PromptChoice(choice: .deny, label: "Deny")
        let denied = ConsentPlan.decided([.microphone], term: deny.term, level: nil, policies: policies, subject: subject)
        #expect(denied.map(\.decision) == [.deny])
        #expect(denied.first?.term == ResolvedTerm(.always))
    }

    /// A person may allow less than was asked, never more: what the typed answer did not
    /// name has no decision, and the next request asks again.
    @Test func whatTheAnswerDidNotNameIsUndecided() {
        let subject = Principal(uid: 4401, name: "carol")
        let decided = ConsentPlan.decided([.camera], term: .always, level: nil,
                                          policies: { _ in PolicyDecision(action: .ask) }, subject: subject)
        let unnamed = ConsentPlan.unnamed(decided, asked: [.camera, .microphone])
        #expect(Array(unnamed.keys) == [.microphone])
        #expect(unnamed[.microphone]?.outcome == .undecided && unnamed[.microphone]?.why == .dismissed)
        #expect(unnamed[.microphone]?.message.contains("did not name microphone") == true)
    }

    /// Location may be allowed coarser than this request gets; a run's answer names its program's file.
    @Test func theQuestionOffersCoarserLevelsAndNamesARunsProgram() {
        #expect(ConsentPlan.coarserLevels([.camera], granted: .city).isEmpty)
        #expect(ConsentPlan.coarserLevels([.location], granted: .street) == [.neighborhood, .city, .country])
        #expect(ConsentPlan.coarserLevels([.location, .camera], granted: nil)
                    == [.street, .neighborhood, .city, .country])
        #expect(ConsentPlan.boundProgram("/usr/bin/cheese", startedByRun: true) == "cheese")
        #expect(ConsentPlan.boundProgram("/usr/bin/cheese", startedByRun: false) == nil)
    }
}
