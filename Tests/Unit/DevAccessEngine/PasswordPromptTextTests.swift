import Testing
import DevAccessEngine

/// `ConsentPlan.passwordText`: what an `auth_self` prompt says, built without a daemon: why a password
/// is asked, which attempt it is, and how long the next check waits.
@Suite struct PasswordPromptTextTests {
    static let question = "alice's cheese (pid 812) asks for the camera."

    @Test func theFirstAttemptSaysThePolicyAsksForThePassword() {
        let text = ConsentPlan.passwordText(Self.question, user: "alice", term: "once", instead: nil, attempt: 1,
                                            attempts: 3, backoff: (wait: .zero, failures: 0))
        #expect(text == Self.question + "\nPolicy asks alice to confirm with their password.")
    }

    @Test func aLaterAttemptSaysTheLastWasWrongAndHowLongTheNextCheckWaits() {
        let text = ConsentPlan.passwordText(Self.question, user: "alice", term: nil, instead: nil, attempt: 2,
                                            attempts: 3, backoff: (wait: .milliseconds(4200), failures: 2))
        #expect(text == Self.question + "\nPolicy asks alice to confirm with their password"
                + " (the last one was wrong; attempt 2 of 3)."
                + "\nAfter 2 wrong passwords devaccessd checks the next one no sooner than in 5 s.")
        let one = ConsentPlan.passwordText(Self.question, user: "alice", term: nil, instead: nil, attempt: 2,
                                           attempts: 3, backoff: (wait: .seconds(1), failures: 1))
        #expect(one.hasSuffix("\nAfter 1 wrong password devaccessd checks the next one no sooner than in 1 s."))
    }

    @Test func aPasswordInsteadOfAChoiceSaysWhyAndWhatItAllows() {
        let text = ConsentPlan.passwordText(Self.question, user: "alice", term: "for 1 hour",
                                            instead: "no login terminal to ask on", attempt: 1, attempts: 3,
                                            backoff: (wait: .zero, failures: 0))
        #expect(text == Self.question + "\ndevaccessd cannot ask you where only you can answer (no login terminal "
                + "to ask on), so it takes your password instead of a yes: type it to allow for 1 hour.")
        let mixed = ConsentPlan.passwordText(Self.question, user: "alice", term: nil, instead: "no terminal",
                                             attempt: 1, attempts: 1, backoff: (wait: .zero, failures: 0))
        #expect(mixed.hasSuffix("type it to allow this."))
    }
}
