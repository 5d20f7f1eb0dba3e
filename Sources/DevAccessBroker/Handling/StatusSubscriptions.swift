import Synchronization
import DevAccessCore
import DevAccessProtocol

/// The connections subscribed to status changes (`subscribe`), and the fan-out to them.
///
/// devaccessd learns of every change in one place: the live enforcer's worker runs once
/// for each decision, revoke, expiry, process exit, policy change and hotplug event, and
/// tells `changed(cause:)` afterwards. One pass then probes once for all subscribers
/// (`BrokerService.gather`), evaluates each subscriber's statuses and sends only those
/// that differ from what it was sent last. Passes never overlap: changes arriving during
/// one are folded into a single next pass, so a burst costs two passes, not one each.
final class StatusSubscriptions: Sendable {
    struct Subscriber: Sendable {
        var uid: UInt32
        var peer: Peer
        var permissions: [Permission]
        var exchange: Exchange
        /// What it was sent last; nil before its first update.
        var sent: [Permission: PermissionStatus]?
    }

    private struct State {
        var subscribers: [UInt64: Subscriber] = [:]
        var perUser: [UInt32: Int] = [:]
        var nextID: UInt64 = 1
        var passRunning = false
        /// Causes that came while a pass ran: one more pass follows it.
        var waitingCauses: [String] = []
    }

    let limitPerUser: Int
    private let state = Mutex(State())

    init(limitPerUser: Int) {
        self.limitPerUser = max(1, limitPerUser)
    }

    /// Adds a subscriber; nil when its user holds `limitPerUser` already (`privileged`:
    /// root and administrators are not limited).
    func add(peer: Peer, permissions: [Permission], exchange: Exchange, privileged: Bool) -> UInt64? {
        state.withLock { state in
            let mine = state.perUser[peer.accountable] ?? 0
            guard privileged || mine < limitPerUser else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.perUser[peer.accountable] = mine + 1
            state.subscribers[id] = Subscriber(uid: peer.uid, peer: peer, permissions: permissions, exchange: exchange)
            return id
        }
    }

    func remove(_ id: UInt64) {
        state.withLock { state in
            guard let gone = state.subscribers.removeValue(forKey: id) else { return }
            let mine = state.perUser[gone.peer.accountable] ?? 1
            state.perUser[gone.peer.accountable] = mine > 1 ? mine - 1 : nil
        }
    }

    var count: Int { state.withLock { $0.subscribers.count } }

    /// Something may have changed statuses. Returns at once (called on the enforcement
    /// worker's thread): the pass runs on the probes' threads. Without subscribers, nothing.
    func changed(cause: String, run: @escaping @Sendable (_ subscribers: [UInt64: Subscriber], _ cause: String,
                                                           _ done: @escaping @Sendable ([UInt64: [Permission: PermissionStatus]]) -> Void) -> Void) {
        let start = state.withLock { state -> [UInt64: Subscriber]? in
            guard !state.subscribers.isEmpty else { return nil }
            if state.passRunning {
                if !state.waitingCauses.contains(cause) { state.waitingCauses.append(cause) }
                return nil
            }
            state.passRunning = true
            return state.subscribers
        }
        guard let start else { return }
        run(start, cause) { sent in
            let next = self.state.withLock { state -> String? in
                for (id, statuses) in sent { state.subscribers[id]?.sent = statuses }
                state.passRunning = false
                guard !state.waitingCauses.isEmpty else { return nil }
                defer { state.waitingCauses = [] }
                return state.waitingCauses.joined(separator: ",")
            }
            if let next { self.changed(cause: next, run: run) }
        }
    }
}
