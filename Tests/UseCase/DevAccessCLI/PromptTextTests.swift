import Testing
import DevAccessCore
import DevAccessInterface
@testable import DevAccessCLI

/// Issue 31: what the CLI shows when devaccessd asks for a password again after a wrong one.
@Suite struct PromptTextTests {
    static func password(_ text: String, attempt: Int64, permissions: [Permission] = [.camera]) -> PromptMessage {
        PromptMessage(prompt: attempt, kind: .password, permissions: permissions, user: "alice", program: nil,
                      reason: nil, devices: [], text: text, choices: [], timeout: 60, attempt: attempt, attempts: 3)
    }

    static let question = "Allow bash to use the camera?\n  requested by: alice (uid 1000)\n  reason: call"

    @Test func aRetryShowsOnlyTheLinesThatChanged() {
        let first = Self.password(Self.question + "\nPolicy asks alice to confirm with their password.", attempt: 1)
        let second = Self.password(Self.question + "\nPolicy asks alice to confirm with their password (the last one "
            + "was wrong; attempt 2 of 3).\nAfter 1 wrong password devaccessd checks the next one no sooner than in 1 s.",
            attempt: 2)
        #expect(PromptText.toShow(first, after: nil) == "\n" + first.text)
        #expect(PromptText.toShow(second, after: first) == "Policy asks alice to confirm with their password (the last "
            + "one was wrong; attempt 2 of 3).\nAfter 1 wrong password devaccessd checks the next one no sooner than in 1 s.")
        // Another group's prompt is a new question: shown whole.
        let other = Self.password(second.text, attempt: 2, permissions: [.microphone])
        #expect(PromptText.toShow(other, after: first) == "\n" + other.text)
    }

    @Test func aTypedPasswordSaysItIsBeingChecked() {
        #expect(PromptText.afterPassword(.line("guess")) == "checking...\n")
        #expect(PromptText.afterPassword(.line("")) == "\n")
        #expect(PromptText.afterPassword(.endOfInput) == "\n")
    }
}
