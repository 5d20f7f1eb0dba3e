import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
@testable import DevAccessBroker
import DevAccessInterface

/// What an `ask` prompt offers (`askChoices`) and what the typed answer decides
/// (`decided(by:)`), built without a daemon or a terminal.
@Suite struct AskChoicesTests {
    static let now = 1_700_000_000.0

    @Test func withoutALimitOnceForTheDefaultTimeAlwaysAndDeny() {
        let choices = BrokerService.askChoices([PolicyDecision(action: .ask)], scope: nil, holder: "bash (pid 812)",
                                               now: Self.now)
        #expect(choices.map(\.choice) == [.allow(.once), .allow(.duration), .allow(.always), .deny])
        #expect(choices[0].label == "Allow once (while bash (pid 812) runs)")
        #expect(choices[1].duration == GrantTerm.defaultAskSeconds)
        #expect(choices[1].label.hasPrefix("Allow for 1h, until "))
        #expect(choices[3].label == "Deny (remembered: you are not asked again)")
    }

    @Test func maxDurationTakesAlwaysAwayAndCapsTheTimeOffered() {
        let capped = PolicyDecision(action: .ask, maxDurationSeconds: 1800)
        let choices = BrokerService.askChoices([PolicyDecision(action: .ask), capped], scope: .always, holder: nil,
                                               now: Self.now)
        #expect(choices.map(\.choice) == [.allow(.once), .allow(.duration), .deny])
        #expect(choices[1].duration == 1800)
        #expect(choices[1].label.hasPrefix("Allow for 30m (the longest the policy allows), until "))
        #expect(choices[0].label.hasSuffix(", at most 30m)"))
    }

    @Test func theTimeAskedForElseTheShortestKeep() {
        let keeps = [PolicyDecision(action: .ask, keepSeconds: 7200), PolicyDecision(action: .ask, keepSeconds: 900)]
        #expect(BrokerService.askChoices(keeps, scope: nil, holder: nil, now: Self.now)[1].duration == 900)
        #expect(BrokerService.askChoices(keeps, scope: .duration(seconds: 600), holder: nil,
                                         now: Self.now)[1].duration == 600)
    }

    @Test func theAnswerDecidesThePermissionsItNames() {
        let subject = Principal(uid: 4401, name: "carol")
        let policies: (Permission) -> PolicyDecision = { _ in PolicyDecision(action: .ask, maxDurationSeconds: 600) }
        let allow = ConsentAnswer(choice: PromptChoice(allow: .always, label: "Allow always"),
                                  permissions: [.camera, .location], level: .city)
        let plans = BrokerService.decided(by: allow, policies: policies, subject: subject)
        #expect(plans.map(\.permission) == [.camera, .location])
        #expect(plans.allSatisfy { $0.decision == .allow && $0.method == .consent && $0.decidedBy == subject })
        // `always` under MaxDuration=10m is recorded for 10 minutes.
        #expect(plans.first?.term == ResolvedTerm(.duration(seconds: 600), cap: 600))
        #expect(plans.map(\.accuracy) == [nil, .city])
        let deny = ConsentAnswer(choice: PromptChoice(choice: .deny, label: "Deny"), permissions: [.microphone],
                                 level: nil)
        let denied = BrokerService.decided(by: deny, policies: policies, subject: subject)
        #expect(denied.map(\.decision) == [.deny])
        #expect(denied.first?.term == ResolvedTerm(.always))
    }
}
