import DevAccessCore
import DevAccessProtocol
import DevAccessInterface

/// An answer typed at devaccessd's terminal question. It names the grant in full:
/// `allow`, each permission, the term (`once`, `for 1h`, `always`), a coarser location
/// level if wanted, the program's file name for a grant bound to a program, then the
/// code (`allow camera microphone always 417`; `deny 417`). A program of the user can
/// redraw the question (docs/security.md, "Consent"), so what the person types is what
/// is granted, never more than was asked: a subset grants that subset, and a word that
/// was not asked for makes the line no answer.
struct ConsentAnswer: Sendable, Hashable {
    /// What one question asks and offers.
    struct Question: Sendable, Hashable {
        var permissions: [Permission]
        var choices: [PromptChoice]
        /// Location levels coarser than asked that an allow may name (location only).
        var levels: [LocationAccuracy] = []
        /// The program's file name when the grant is bound to that program (a run); nil
        /// when it is the user's (a request).
        var program: String? = nil

        /// The whole line that picks `choice` for everything asked (at a coarser location
        /// `level`): "allow camera for 1h 417".
        func answer(_ choice: PromptChoice, code: String, level: LocationAccuracy? = nil) -> String {
            guard let term = termWords(choice) else { return "deny \(code)" }
            let words = ["allow"] + permissions.map(\.rawValue) + term + (level.map { [$0.rawValue] } ?? [])
            return (words + programWords + [code]).joined(separator: " ")
        }

        /// "always", or "for 1h": a `for` names its length, so a redrawn "for 1 minute"
        /// cannot stand for the 30 days offered. nil for deny.
        func termWords(_ choice: PromptChoice) -> [String]? {
            guard case .allow(let word) = choice.choice else { return nil }
            return [word.rawValue] + (choice.duration.map { [DurationText.format(seconds: $0)] } ?? [])
        }

        var programWords: [String] {
            program.map { TerminalPrompt.oneLine($0).lowercased().split(whereSeparator: \.isWhitespace).map(String.init) }
                ?? []
        }
    }

    var choice: PromptChoice
    /// Exactly the permissions typed, in the order asked (a denial: all asked).
    var permissions: [Permission]
    /// A coarser location level typed (allow with location only).
    var level: LocationAccuracy?

    /// The answer `typed` gives `question` with `code`; nil when it is no answer.
    static func parse(_ typed: String, to question: Question, code: String) -> ConsentAnswer? {
        var words = typed.lowercased().split(whereSeparator: \.isWhitespace).map(String.init)[...]
        guard words.count >= 2, words.removeLast() == code, let verb = words.popFirst() else { return nil }
        if verb == "deny" {
            guard words.isEmpty, let deny = question.choices.first(where: { $0.choice == .deny }) else { return nil }
            return ConsentAnswer(choice: deny, permissions: question.permissions, level: nil)
        }
        guard verb == "allow" else { return nil }
        var named: Set<Permission> = []
        while let word = words.first, let permission = Permission(parsing: word) {
            // Not asked, or twice: not an answer to this question.
            guard question.permissions.contains(permission), named.insert(permission).inserted else { return nil }
            words.removeFirst()
        }
        guard !named.isEmpty, let choice = question.choices.first(where: { choice in
            question.termWords(choice).map { words.starts(with: $0) } ?? false
        }), let term = question.termWords(choice) else { return nil }
        words.removeFirst(term.count)
        var level: LocationAccuracy?
        if let word = words.first, let typed = LocationAccuracy(rawValue: word) {
            guard named.contains(.location), question.levels.contains(typed) else { return nil }
            level = typed
            words.removeFirst()
        }
        guard Array(words) == question.programWords else { return nil }
        return ConsentAnswer(choice: choice, permissions: question.permissions.filter(named.contains), level: level)
    }
}
