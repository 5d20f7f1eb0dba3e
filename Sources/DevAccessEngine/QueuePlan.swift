import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessInterface

/// A request's permissions an administrator decides (policy auth_admin): which a request of
/// the user already waiting covers, which a new one queues, whether the person may queue
/// one more, and what the requester hears. Values only: the daemon queues, waits and tells.
public struct QueuePlan: Sendable {
    public let group: [Permission]
    /// Each permission's waiting request (none yet for those `queued` takes).
    public private(set) var pendingOf: [Permission: Int64] = [:]
    /// The requests this one queued.
    public private(set) var fresh: Set<Int64> = []

    /// `waiting`: the user's requests waiting now.
    public init(_ group: [Permission], waiting: [PendingRequest], location: LocationAsk?) {
        self.group = group
        for permission in group {
            if let earlier = waiting.first(where: { RequestPlan.covers($0, permission, location: location) }) {
                pendingOf[permission] = earlier.id
            }
        }
    }

    /// The permissions no waiting request covers: a new request asks for them.
    public var uncovered: [Permission] { group.filter { pendingOf[$0] == nil } }

    /// The new request `id` queued for the uncovered permissions.
    public mutating func queued(_ id: Int64) {
        for permission in uncovered { pendingOf[permission] = id }
        fresh.insert(id)
    }

    /// The waiting requests this request is answered by, in order.
    public var ids: [Int64] { Set(pendingOf.values).sorted() }

    /// The permissions of the group request `id` stands for.
    public func permissions(of id: Int64) -> [Permission] { group.filter { pendingOf[$0] == id } }

    /// What the requester hears of `permission`: its request's resolution (`resolved`: the
    /// request as resolved and what the verdict gave each permission), else that it waits.
    public func result(_ permission: Permission, resolved: (request: PendingRequest, results: [RequestResult])?,
                       waited: Bool) -> RequestResult {
        guard let id = pendingOf[permission] else { return RequestResult.undecided(permission, .disconnected) }
        guard let resolved else {
            let earlier = fresh.contains(id) ? "" : " (an earlier request of yours, still waiting)"
            let advice = waited ? "you stopped waiting; it stays queued"
                : "run 'devaccess request \(permission.rawValue) --wait' to wait for the answer"
            return RequestResult(permission: permission, outcome: .pending, pending: id,
                                 message: "waiting for an administrator to approve request \(id)\(earlier); " + advice)
        }
        if let result = resolved.results.first(where: { $0.permission == permission }) { return result }
        // Resolved while this request was being registered: the ledger says how.
        let request = resolved.request
        let by = request.resolvedBy.map { " by \($0.name)" } ?? ""
        switch request.resolution {
        case .approved?:
            return RequestResult(permission: permission, outcome: .granted, how: .admin,
                                 message: "request \(id) was approved\(by)")
        case .rejected?:
            return RequestResult(permission: permission, outcome: .denied, how: .admin,
                                 message: "request \(id) was rejected\(by)")
        case .declined?:
            return ApprovalPlan.declined(permission, id: id, by: request.resolvedBy)
        case .withdrawn?, nil:
            return RequestResult.undecided(permission, .dismissed)
        }
    }

    /// How many requests the person `accountable` (with the uids of their user namespaces)
    /// has waiting, when `forAdmin` would queue a new one (no request of `uid` waiting covers
    /// it) and they have `limit` already; nil when the request may queue. `waiting`: everyone's.
    public static func overLimit(_ forAdmin: [Permission], waiting: [PendingRequest], uid: UInt32,
                                 accountable: UInt32, location: LocationAsk?, limit: Int) -> Int? {
        let queuesNew = forAdmin.contains { permission in
            !waiting.contains { $0.subject.uid == uid && RequestPlan.covers($0, permission, location: location) }
        }
        let theirs = waiting.filter { SubordinateIDs.accountable($0.subject.uid) == accountable }.count
        return queuesNew && theirs >= limit ? theirs : nil
    }
}
