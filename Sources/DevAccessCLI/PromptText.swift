import DevAccessInterface

/// What `PromptSession` writes around a prompt on the caller's terminal.
enum PromptText {
    /// `prompt`'s text as shown after `previous` on the same terminal: a password asked again
    /// (a wrong one was typed) keeps its question on the screen above, so only the lines
    /// that changed (which attempt, the wait) are shown, not the whole question again.
    static func toShow(_ prompt: PromptMessage, after previous: PromptMessage?) -> String {
        guard prompt.kind == .password, (prompt.attempt ?? 1) > 1, let previous, previous.kind == .password,
              previous.permissions == prompt.permissions else { return "\n" + prompt.text }
        let lines = prompt.text.split(separator: "\n", omittingEmptySubsequences: false)
        let before = previous.text.split(separator: "\n", omittingEmptySubsequences: false)
        let same = zip(lines, before).prefix { $0 == $1 }.count
        return lines.dropFirst(same).joined(separator: "\n")
    }

    /// Ends the password line: a typed password says it is being checked, since the check
    /// may wait for the back-off after wrong ones (up to 15 s) and silence reads as a hang.
    /// ASCII dots: the CLI does not know the terminal's character set.
    static func afterPassword(_ input: Terminal.Input) -> String {
        if case .line(let typed) = input, !typed.isEmpty { return "checking...\n" }
        return "\n"
    }
}
