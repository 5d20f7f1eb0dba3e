/// Caps on the free text the ledger stores, so that no caller (a user's request, an
/// admin's `--reason`, a long process chain) can make one event or row arbitrarily large.
/// The protocol and the CLI refuse a reason over 1 KiB; these caps are the last line for
/// every other path (`"once: " + reason`, an `--offline` run, text built by the broker).
/// A longer text is cut at a character boundary and says so, with its full length.
public enum StoredText {
    /// Reasons and notes (a grant's reason, a pending request's, a resolution note).
    public static let maxReasonBytes = 1024
    /// Any other value in an audit event's details.
    public static let maxDetailBytes = 4096
    /// Detail keys that hold a reason or note.
    static let reasonKeys: Set<String> = ["reason", "note", "revoke_reason"]

    /// `text` if it fits in `limit` bytes of UTF-8; else its start and " [cut: N bytes]".
    public static func capped(_ text: String, limit: Int = maxReasonBytes) -> String {
        let total = text.utf8.count
        guard total > limit else { return text }
        let marker = " [cut: \(total) bytes]"
        let budget = max(0, limit - marker.utf8.count)
        var kept = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            if used + size > budget { break }
            kept.append(character)
            used += size
        }
        return kept + marker
    }

    /// An audit event's details with every value within its cap.
    static func cappedDetails(_ details: [String: String]) -> [String: String] {
        guard details.values.contains(where: { $0.utf8.count > maxReasonBytes }) else { return details }
        var capped = details
        for (key, value) in details {
            capped[key] = Self.capped(value, limit: reasonKeys.contains(key) ? maxReasonBytes : maxDetailBytes)
        }
        return capped
    }
}
