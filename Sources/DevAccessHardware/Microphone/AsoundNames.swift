import DevAccessSystem

/// The names alsa-lib gives a card (its short name) and its PCMs, as the kernel publishes
/// them to every user in /proc/asound. alsa-lib reads them through the card's control node,
/// which not every user can open: read here instead, the names are the same for root and a
/// user, so `status` (devaccessd's probe) and `devices` (the user's) say one name.
enum AsoundNames {
    static let root = "/proc/asound"

    /// Card `number`'s short name and its capture PCMs' names; nil when /proc/asound has no
    /// such card, or a card of another id there (not the card udev listed).
    static func read(card number: Int, cardID: String, pcms: [Int],
                     root: String) -> (card: String, pcms: [Int: String])? {
        let directory = "\(root)/card\(number)"
        guard let id = text(directory + "/id"), trimmed(id) == cardID,
              let cards = text(root + "/cards") else { return nil }
        // " 7 [Loopback       ]: Loopback - Loopback": number, id, driver - short name.
        guard let line = cards.split(separator: "\n").first(where: { $0.split(separator: " ").first == "\(number)" }),
              let colon = line.firstRange(of: "]: "), let dash = line[colon.upperBound...].firstRange(of: " - ") else {
            return nil
        }
        var names: [Int: String] = [:]
        for pcm in pcms {
            let info = text("\(directory)/pcm\(pcm)c/info") ?? ""
            let name = info.split(separator: "\n").first { $0.hasPrefix("name: ") }?.dropFirst("name: ".count)
            if let name { names[pcm] = trimmed(String(name)) }
        }
        return (trimmed(String(line[dash.upperBound...])), names)
    }

    private static func text(_ path: String) -> String? {
        (try? FileDescriptor.contents(of: path, limit: 1 << 16)).map { String(decoding: $0, as: UTF8.self) }
    }

    private static func trimmed(_ text: String) -> String {
        String(text.drop { $0 == " " || $0 == "\n" }.reversed().drop { $0 == " " || $0 == "\n" }.reversed())
    }
}
