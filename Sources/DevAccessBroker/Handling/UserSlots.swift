import Synchronization

/// How many of something limited (open prompts, clients waiting for an administrator)
/// each uid holds, at most `limit` each.
final class UserSlots: Sendable {
    let limit: Int
    private let held = Mutex<[UInt32: Int]>([:])

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Takes one of `uid`'s slots; false when it holds `limit` already.
    func take(_ uid: UInt32) -> Bool {
        held.withLock { held in
            let mine = held[uid] ?? 0
            guard mine < limit else { return false }
            held[uid] = mine + 1
            return true
        }
    }

    func give(_ uid: UInt32) {
        held.withLock { held in
            let mine = held[uid] ?? 0
            held[uid] = mine > 1 ? mine - 1 : nil
        }
    }
}
