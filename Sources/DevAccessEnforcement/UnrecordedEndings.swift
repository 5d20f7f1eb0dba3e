import DevAccessSystem
import FoundationEssentials
import Glibc
import Synchronization
import DevAccessCore
import DevAccessLedger

/// Ends of access (revoke, deny, reset) the ledger could not record yet: SQLite's write
/// lock held by a stray process, a full disk. Their ACL entries are already off the nodes
/// (ending access never waits for the ledger). Every engine run first retries recording
/// them, and until then applies none of the grants they end, so no run brings the access
/// back in between.
///
/// Kept in memory, shared by every copy of an `Enforcer`: a daemon that restarts before
/// the ledger can be written forgets them, which is why the command that failed says so
/// and exits 75 (run it again).
public final class UnrecordedEndings: Sendable {
    public enum Ending: Sendable, Hashable {
        case revoke(permission: Permission, subject: Principal, deviceID: String?, reason: String)
        case deny(Enforcer.DecisionRequest)
        case reset(subject: Principal, permission: Permission?)

        var subject: Principal {
            switch self {
            case .revoke(_, let subject, _, _), .reset(let subject, _): return subject
            case .deny(let request): return request.subject
            }
        }
    }

    struct Item: Sendable {
        var ending: Ending
        var actor: Principal
        /// The grants it ends, as the ledger held them when the write failed.
        var grants: Set<Int64>
        var at: Date
    }

    private let items = Mutex<[Item]>([])

    public init() {}

    public var isEmpty: Bool { items.withLock { $0.isEmpty } }

    /// Grants no run may apply, and devaccessd may open nothing for, until their ending is
    /// recorded: the ledger still holds them as standing.
    public var withheld: Set<Int64> { items.withLock { Set($0.flatMap(\.grants)) } }

    func add(_ item: Item) {
        items.withLock { $0.append(item) }
    }

    /// Records the endings in the order they were made, each removed once written; the
    /// first that still cannot be written stops the retry (and the run) with its error.
    func record(_ write: (Item) throws(LedgerError) -> Void) throws(LedgerError) {
        while let item = items.withLock({ $0.first }) {
            try write(item)
            items.withLock { list in
                if !list.isEmpty { list.removeFirst() }
            }
        }
    }
}

extension Enforcer {
    /// Ends access without the ledger: removes the entries of the grants `ending` ends,
    /// keeps it for the next runs to record, and says so. Reading still works when writing
    /// does not (a lock on the write lock, a full disk); when reading fails too, nothing is
    /// known to remove and the ledger's error is all there is to say.
    func failClosed(_ ending: UnrecordedEndings.Ending, _ failure: LedgerError,
                    ends: () throws(LedgerError) -> [Grant]) -> EnforcementError {
        let grants: [Grant]
        do {
            grants = try ends()
        } catch {
            return .ledger(failure)
        }
        removeEntriesFailingClosed(of: grants)
        unrecorded.add(.init(ending: ending, actor: actor, grants: Set(grants.map(\.id)), at: clock()))
        return .endedUnrecorded(ending, failure)
    }

    /// Writes the endings a locked or full ledger refused earlier, before anything else.
    /// Each ends only the grants it ended then: a decision recorded since (an admin's new
    /// grant, the user's own request) is never touched by it.
    func recordUnrecordedEndings() throws(LedgerError) {
        guard !unrecorded.isEmpty else { return }
        try unrecorded.record { (item: UnrecordedEndings.Item) throws(LedgerError) in
            let late = "ended at \(ISOTime.format(item.at)), recorded late: the ledger could not be written then"
            func noted(_ reason: String) -> String { reason.isEmpty ? late : reason + "; " + late }
            switch item.ending {
            case .revoke(let permission, let subject, let deviceID, let reason):
                _ = try ledger.revoke(permission: permission, uid: subject.uid, deviceID: deviceID, by: item.actor,
                                      reason: noted(reason), at: clock(), only: item.grants)
            case .deny(var request):
                let since = try ledger.grants(uid: request.subject.uid, permission: request.permission,
                                              includeInactive: true, now: clock())
                    .contains { $0.created > item.at }
                if since {
                    // Someone decided again meanwhile: that decision stands; the denial only
                    // ends what it ended then.
                    _ = try ledger.revoke(permission: request.permission, uid: request.subject.uid,
                                          deviceID: request.deviceID, by: item.actor,
                                          reason: noted("denied, then superseded by a newer decision"),
                                          at: clock(), only: item.grants)
                } else {
                    request.reason = noted(request.reason)
                    _ = try acting(as: item.actor).recordDecision(request)
                }
            case .reset(let subject, let permission):
                _ = try ledger.reset(subject: subject, permission: permission, by: item.actor, at: clock(),
                                     only: item.grants)
            }
        }
    }
}
