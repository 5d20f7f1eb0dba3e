/// How long a decision holds: the one term of devaccess, from what a request asks for
/// (the protocol's `scope`), a queued request's row, a prompt's choices and an approval,
/// through the policy's `Keep=` and `MaxDuration=` (`ResolvedTerm`), to the grant the
/// ledger records (`once`; `until` with an expiry; `always`).
public enum GrantTerm: Sendable, Hashable {
    /// While the process that asked runs (for a program: one `devaccess run`).
    case once
    /// For `seconds` seconds from when the decision is recorded.
    case duration(seconds: Int64)
    /// Until revoked.
    case always

    /// The longest `for` a request may name: 366 days.
    public static let maxDurationSeconds: Int64 = 366 * 24 * 3600
    /// What "allow for a time" offers when neither the request nor `Keep=` names a duration.
    public static let defaultAskSeconds: Int64 = 3600

    /// How a term is written: the protocol's `scope`, `term` and a prompt's `choice`, and a
    /// queued request's `scope` column. `for` goes with its seconds beside it (`duration`).
    public enum Word: String, Sendable, Hashable, CaseIterable {
        case once
        case duration = "for"
        case always
    }

    public var word: Word {
        switch self {
        case .once: return .once
        case .duration: return .duration
        case .always: return .always
        }
    }

    /// The seconds of a `for`; nil for the others.
    public var seconds: Int64? {
        if case .duration(let seconds) = self { return seconds }
        return nil
    }

    /// The term a word and its seconds spell: seconds (at least 1) with `for` and only
    /// with it; nil when they do not fit together.
    public init?(word: Word, seconds: Int64?) {
        switch (word, seconds) {
        case (.once, nil): self = .once
        case (.always, nil): self = .always
        case (.duration, let seconds?) where seconds > 0: self = .duration(seconds: seconds)
        default: return nil
        }
    }
}

/// A term after the policy had its say: the requested term, else `Keep=`, else once; then
/// capped by `MaxDuration=`.
public struct ResolvedTerm: Sendable, Hashable {
    public var term: GrantTerm
    /// `MaxDuration=` where it bounds the term: a `once` ends then at the latest even while
    /// its process runs; a `for` was shortened to it (a longer `for`, or `always`). nil:
    /// the term holds as it is.
    public var cap: Int64?

    public init(_ term: GrantTerm, cap: Int64? = nil) {
        self.term = term
        self.cap = cap
    }

    /// `requested`, else `keepSeconds` (Keep=), else once; then capped by
    /// `maxDurationSeconds` (`capped(_:)`).
    public static func resolve(_ requested: GrantTerm?, keepSeconds: Int64?,
                               maxDurationSeconds: Int64?) -> ResolvedTerm {
        let term = requested ?? keepSeconds.map { .duration(seconds: $0) } ?? .once
        return ResolvedTerm(term).capped(maxDurationSeconds)
    }

    /// Under `MaxDuration=` `maximum` (nil, or not positive: no limit): a `once` ends at
    /// `maximum` at the latest, a longer `for` and `always` become `for maximum`, and say so.
    public func capped(_ maximum: Int64?) -> ResolvedTerm {
        guard let maximum, maximum > 0 else { return self }
        switch term {
        case .once:
            return ResolvedTerm(.once, cap: min(cap ?? maximum, maximum))
        case .duration(let seconds):
            return seconds > maximum ? ResolvedTerm(.duration(seconds: maximum), cap: maximum) : self
        case .always:
            return ResolvedTerm(.duration(seconds: maximum), cap: maximum)
        }
    }

    /// "once (while bash (pid 812) runs)", "once (while … runs, at most 8h)", "for 1h",
    /// "for 8h (the longest the policy allows)", "always". `shell`: the holder is the shell a
    /// person typed the request in, "until you close this shell, /usr/bin/bash (pid 812)"
    /// ("once" would read as a single use).
    public func text(holder: String? = nil, shell: Bool = false) -> String {
        switch term {
        case .once where shell:
            return "until you close this shell" + (holder.map { ", \($0)" } ?? "")
                + (cap.map { ", at most \(DurationText.format(seconds: $0))" } ?? "")
        case .once:
            var text = "once (while \(holder ?? "the program that asked") runs"
            if let cap { text += ", at most \(DurationText.format(seconds: cap))" }
            return text + ")"
        case .duration(let seconds):
            return "for \(DurationText.format(seconds: seconds))" + (cap != nil ? " (the longest the policy allows)" : "")
        case .always:
            return "always"
        }
    }
}

extension PolicyDecision {
    /// The term a decision under this policy holds for, `requested` or not (`ResolvedTerm.resolve`).
    public func term(_ requested: GrantTerm?) -> ResolvedTerm {
        ResolvedTerm.resolve(requested, keepSeconds: keepSeconds, maxDurationSeconds: maxDurationSeconds)
    }
}
