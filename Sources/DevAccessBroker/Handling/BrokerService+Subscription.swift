import DevAccessCore
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// `subscribe`: status changes pushed to the connection, no polling.
extension BrokerService {
    /// The engine judges the subscription (the peer's own statuses), then this registers
    /// the subscriber and answers with its first `update` (every status asked
    /// for, cause `initial`). The request stays open: updates follow whenever the live
    /// enforcer runs and a status changed, until the client leaves.
    func subscribe(_ query: SubscribeQuery, envelope: RequestEnvelope, peer: Peer, exchange: Exchange) {
        // On the event loop, as every subscribe: a flood of them must not wait on handler threads.
        let service = EngineService(caller: callerOnLoop(of: peer), runner: QueuedEngine(enforcement: enforcement))
        let permissions: [Permission]
        do throws(InterfaceError) {
            permissions = try service.subscription(query)
        } catch {
            guard case .refused(let operation, let reason) = error else {
                exchange.finish(.error(error.protocolError))
                return
            }
            exchange.finish(refuse(operation, id: envelope.id, peer: peer, subject: nil, reason: reason))
            return
        }
        guard let id = subscriptions.add(peer: peer, permissions: permissions, exchange: exchange,
                                         privileged: service.caller.isUnlimited) else {
            exchange.finish(refuse("subscribe", id: envelope.id, peer: peer, subject: nil,
                                   reason: "\(describe(peer)) holds \(subscriptions.limitPerUser) status subscriptions "
                                       + "already, the most one user may; close one and subscribe again",
                                   code: .busy))
            return
        }
        exchange.listen { [subscriptions] event in
            // The event loop reads nothing from a subscribed connection: only its end comes.
            guard case .departed(let departure) = event else { return }
            subscriptions.remove(id)
            exchange.finish(.error(ProtocolError(.unavailable, context: "subscribe",
                reason: departure == .shutdown ? "devaccessd is stopping; subscribe again once it is back"
                    : "the subscription ended")))
        }
        statusesChanged(cause: "initial")
    }

    /// Something may have changed statuses (`cause`: the live enforcer's run). One probe for
    /// all subscribers; each gets the statuses that differ from what it was sent last.
    func statusesChanged(cause: String) {
        subscriptions.changed(cause: cause) { subscribers, cause, done in
            let wanted = Permission.all.filter { permission in
                subscribers.values.contains { $0.permissions.contains(permission) }
            }
            self.gather(wanted, kept: true) { reports, read in
                var identities: [UInt32: UserIdentity] = [:]
                var sent: [UInt64: [Permission: PermissionStatus]] = [:]
                for (id, subscriber) in subscribers {
                    let subject = identities[subscriber.uid] ?? self.keptIdentity(of: subscriber.peer)
                    identities[subscriber.uid] = subject
                    let statuses = self.statuses(for: subject, reports: reports.filter {
                        subscriber.permissions.contains($0.permission)
                    }, read: read)
                    let changed = statuses.filter { status in
                        subscriber.sent?[status.permission].map { Self.sameForSubscriber($0, status) } != true
                    }
                    guard !changed.isEmpty else { continue }
                    subscriber.exchange.send(.update(StatusUpdate(
                        user: subject.name, uid: subject.uid, cause: subscriber.sent == nil ? "initial" : cause,
                        permissions: changed)), awaitingAnswer: false)
                    sent[id] = Dictionary(statuses.map { ($0.permission, $0) }) { $1 }
                }
                done(sent)
            }
        }
    }

    /// Whether a subscriber would see no change: the same status, level, devices (and
    /// whether each is usable), reasons and drift. A node's facts, and the `access` reasons
    /// that print them, are left out: another user's grant adds an ACL entry (and a mask)
    /// to the node, which is no change of this user's status (`usable` says if it were).
    static func sameForSubscriber(_ old: PermissionStatus, _ new: PermissionStatus) -> Bool {
        func told(_ reasons: [Reason]) -> [Reason] { reasons.filter { $0.kind != .access } }
        return old.status == new.status && old.accuracy == new.accuracy && told(old.reasons) == told(new.reasons)
            && old.drift == new.drift
            && old.devices.map { [$0.device.id, String($0.usable)] } == new.devices.map { [$0.device.id, String($0.usable)] }
    }
}
