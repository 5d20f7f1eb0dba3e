import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessSystem

/// The enforcement engine: records decisions in the ledger and makes device nodes agree.
///
/// Every operation writes its intent to the ledger first and then edits ACLs, so a crash
/// at any point leaves a state the next run repairs (see `ApplyPass`). Every operation
/// also ends the grants whose time ran out and removes their entries.
///
/// A struct of values and a `Sendable` ledger: operations are short, blocking, and run
/// one after another from the CLI (or later the broker's queue).
public struct Enforcer: Sendable {
    public let ledger: Ledger
    public let devices: any DeviceSource
    /// Who is acting (root for the admin CLI); recorded in every audit event.
    public let actor: Principal
    /// Permissions whose devices get user ACL entries. Location is not among them: users
    /// get it from devaccessd (or gpsd), never by opening a receiver's node.
    public var nodePermissions: [Permission]
    public var clock: @Sendable () -> Date
    /// Users as a login would have them (for drift: which groups open a denied node).
    public var identities: @Sendable (UInt32) -> UserIdentity?
    /// The policy in force, asked at every run: grants it forbids are ended, and access it
    /// forbids that remains is drift. nil: the engine does not apply a policy (benchmarks,
    /// engine tests).
    public var policy: @Sendable () -> PolicyReading?
    /// Revokes, denials and resets whose entries are off but whose record the ledger
    /// refused; shared by the engine's copies (`acting(as:)`), retried by every run.
    public let unrecorded: UnrecordedEndings
    /// TEST-ONLY (DEBUG builds): the `CrashPoint` at which the process ends, from
    /// `DEVACCESS_TEST_CRASH_AT` as the executable's main read it; nil: none.
    public var testCrashAt: String?

    public init(ledger: Ledger, devices: any DeviceSource, actor: Principal,
                nodePermissions: [Permission] = [.camera, .microphone],
                clock: @escaping @Sendable () -> Date = { Date() },
                identities: @escaping @Sendable (UInt32) -> UserIdentity? = { try? UserDatabase.identity(uid: $0) },
                policy: @escaping @Sendable () -> PolicyReading? = { nil },
                unrecorded: UnrecordedEndings = UnrecordedEndings()) {
        self.ledger = ledger
        self.devices = devices
        self.actor = actor
        self.nodePermissions = nodePermissions
        self.clock = clock
        self.identities = identities
        self.policy = policy
        self.unrecorded = unrecorded
    }

    /// The same engine, recording `principal` as the one who acts.
    public func acting(as principal: Principal) -> Enforcer {
        var copy = Enforcer(ledger: ledger, devices: devices, actor: principal, nodePermissions: nodePermissions,
                            clock: clock, identities: identities, policy: policy, unrecorded: unrecorded)
        copy.testCrashAt = testCrashAt
        return copy
    }

    // MARK: - Decisions

    /// A decision to record and enforce: an administrator's, or one a request produced
    /// (a prompt, a password, the policy), which keeps who decided and how.
    public struct DecisionRequest: Sendable, Hashable {
        public var subject: Principal
        public var permission: Permission
        public var deviceID: String?
        public var decision: Decision
        public var scope: GrantTerm.Word
        public var expires: Date?
        /// `--for`: the grant ends this many seconds after it is recorded (scope `until`, no
        /// `expires`): the term starts when the row is written, not when the admin typed it.
        public var lastingSeconds: Int64?
        public var reason: String
        /// `once` of a request (an approval): the process the grant lasts for.
        public var holder: ProcessHolder?
        /// A program grant: only runs of this program use it (`devaccess run`).
        public var program: Program?
        /// An allow of location: how precisely the user is told where the machine is (nil:
        /// exact). Refused with any other permission and with a denial.
        public var accuracy: LocationAccuracy?
        /// Who decided: nil, the engine's actor (the administrator); else the person who
        /// answered a prompt or confirmed with their password, or devaccessd for the policy.
        public var decidedBy: Principal?
        /// How it was decided (`admin` unless a request decided it).
        public var method: DecisionMethod

        public init(subject: Principal, permission: Permission, deviceID: String? = nil, decision: Decision,
                    scope: GrantTerm.Word, expires: Date? = nil, lastingSeconds: Int64? = nil, reason: String = "",
                    holder: ProcessHolder? = nil, program: Program? = nil, accuracy: LocationAccuracy? = nil,
                    decidedBy: Principal? = nil, method: DecisionMethod = .admin) {
            self.decidedBy = decidedBy
            self.method = method
            self.accuracy = accuracy
            self.program = program
            self.lastingSeconds = lastingSeconds
            self.holder = holder
            self.subject = subject
            self.permission = permission
            self.deviceID = deviceID
            self.decision = decision
            self.scope = scope
            self.expires = expires
            self.reason = reason
        }
    }

    public struct DecisionOutcome: Sendable, Hashable {
        public var grant: Grant
        /// Allow grants this decision ended: the same device scope for a grant, any for a denial.
        public var ended: [Grant]
        public var report: EnforcementReport
    }

    /// Records an allow or deny and applies it. A grant replaces the user's allow grants
    /// of the same device scope (so `--for 1h` after `--always` really ends in an hour); a
    /// denial ends the allow grants it covers. A denial recorded earlier stays in the ledger
    /// but no longer applies: the newest decision wins (see `Decisions`).
    public func decide(_ request: DecisionRequest) throws(EnforcementError) -> DecisionOutcome {
        guard let result = decide([request]).first else { throw .ledger(.invalidArgument("nothing was decided")) }
        return try result.get()
    }

    /// Each decision's own result, in the order given (`decide([...])`, `resolve`).
    public typealias DecisionResult = Result<DecisionOutcome, EnforcementError>

    /// Records the decisions in order, as `decide` does each, then applies them in one run
    /// (a request's permissions, decided together). Each has its own result, in the order
    /// given: one that cannot be taken (an allow the policy now forbids, a device that is
    /// gone, a term that is not valid) fails alone, saying why, and the others are recorded
    /// and applied all the same. A denial only ends access, so it never waits on another
    /// decision of the batch; and when the ledger refuses it, its entries are removed anyway
    /// (`endedUnrecorded`).
    public func decide(_ requests: [DecisionRequest]) -> [DecisionResult] {
        var (results, valid) = validated(requests)
        var recorded: [RecordedDecision] = []
        do {
            // Earlier endings first, so the ledger keeps the order things happened in.
            try recordUnrecordedEndings()
            for index in valid {
                let (grant, ended) = try recordDecision(requests[index])
                recorded.append(RecordedDecision(index: index, grant: grant, ended: ended))
            }
        } catch {
            // The ledger stopped at one decision: it and those after it are not written.
            refused(valid.dropFirst(recorded.count), of: requests, error, into: &results)
        }
        apply(recorded, of: requests, into: &results)
        return Self.settled(results)
    }

    /// Whether `request` can be recorded as it is; nothing is written.
    func validate(_ request: DecisionRequest) throws(EnforcementError) {
        if let deviceID = request.deviceID { try requireDevice(deviceID, permission: request.permission) }
        if request.decision == .allow, let forbidden = policyForbids(request.subject, request.permission) {
            // The run would end it at once; say so instead of recording a grant that never holds.
            throw .policyForbids(forbidden)
        }
        try Self.validateTerm(request, now: clock())
    }

    /// An administrator's approval or rejection (with denials) of pending request `id`: the
    /// decisions that can be taken and the request's resolution are written in one
    /// transaction (`Ledger.recordResolution`), then applied. Each decision has its own
    /// result, as in `decide([...])`: one that cannot be taken (an allow the policy forbids
    /// by now) fails alone, saying why, and is not written; the others are, and the request
    /// is resolved all the same (hostile review L2: an approval of camera and microphone
    /// where the policy had come to forbid the microphone failed as a whole, the camera
    /// with it). Throws when the request itself cannot be resolved: it does not exist or
    /// was resolved already (nothing written), or the ledger refused the transaction (the
    /// request still waits; a denial's entries are removed anyway, `endedUnrecorded`).
    public func resolve(_ id: Int64, as resolution: PendingResolution, decisions requests: [DecisionRequest],
                        note: String) throws(EnforcementError) -> (request: PendingRequest, results: [DecisionResult]) {
        var (results, valid) = validated(requests)
        let written: (request: PendingRequest, recorded: [(grant: Grant, ended: [Grant])])
        do {
            try recordUnrecordedEndings()
            let now = clock()
            let decisions = try valid.map { (index) throws(LedgerError) in
                ResolutionDecision(grant: newGrant(requests[index], now: now),
                                   ends: Set(try coveredAllows(requests[index]).map(\.id)))
            }
            // A permission none of whose decisions can be taken is resolved without one; the
            // audit says so and why.
            var notTaken: [Permission: String] = [:]
            for (index, result) in results.enumerated() {
                guard case .failure(let error)? = result else { continue }
                let permission = requests[index].permission
                if !valid.contains(where: { requests[$0].permission == permission }) {
                    notTaken[permission] = error.description
                }
            }
            written = try ledger.recordResolution(id, as: resolution, decisions: decisions, notTaken: notTaken,
                                                  by: actor, note: note, at: now)
        } catch {
            // A refusal (no such request, already resolved) wrote nothing and says why; it is
            // no ledger failure, and ends nobody's access.
            if case .invalidArgument = error { throw .ledger(error) }
            // Nothing of the transaction was written. A denial ends access all the same.
            refused(valid, of: requests, error, into: &results)
            let denials = valid.filter { requests[$0].decision == .deny }.compactMap { index -> EnforcementError? in
                guard case .failure(let failure)? = results[index] else { return nil }
                return failure
            }
            throw denials.last ?? .ledger(error)
        }
        apply(zip(valid, written.recorded).map { RecordedDecision(index: $0, grant: $1.grant, ended: $1.ended) },
              of: requests, into: &results)
        return (written.request, Self.settled(results))
    }

    /// A decision the ledger wrote: its place in the batch, its row, the allows it ended.
    private struct RecordedDecision {
        var index: Int
        var grant: Grant
        var ended: [Grant]
    }

    /// The batch's results so far (a decision that cannot be taken fails alone: nothing is
    /// written for it), and the places of those to record, in order.
    private func validated(_ requests: [DecisionRequest]) -> (results: [DecisionResult?], valid: [Int]) {
        var results = [DecisionResult?](repeating: nil, count: requests.count)
        var valid: [Int] = []
        for (index, request) in requests.enumerated() {
            do {
                try validate(request)
                valid.append(index)
            } catch {
                results[index] = .failure(error)
            }
        }
        return (results, valid)
    }

    /// The decisions at `indices` the ledger did not write: a denial ends access all the
    /// same (it never waits for the ledger: `endedUnrecorded`); an allow fails.
    private func refused(_ indices: some Sequence<Int>, of requests: [DecisionRequest], _ error: LedgerError,
                         into results: inout [DecisionResult?]) {
        for index in indices {
            let request = requests[index]
            guard request.decision == .deny else {
                results[index] = .failure(.ledger(error))
                continue
            }
            results[index] = .failure(failClosed(.deny(request), error) { () throws(LedgerError) -> [Grant] in
                try coveredAllows(request)
            })
        }
    }

    /// What was written holds, and is applied now in one run (a written denial must not
    /// wait for the next run). A run that fails leaves it to the next run, and says so.
    private func apply(_ recorded: [RecordedDecision], of requests: [DecisionRequest],
                       into results: inout [DecisionResult?]) {
        guard !recorded.isEmpty else { return }
        let applied = Result { () throws(LedgerError) -> EnforcementReport in
            try run(scope: Set(recorded.map { requests[$0.index].subject.uid }))
        }
        for entry in recorded {
            results[entry.index] = applied.map { report in
                var own = report
                if !nodePermissions.contains(entry.grant.permission) {
                    own.notes.append(Self.serviceNote(entry.grant.permission))
                }
                return DecisionOutcome(grant: entry.grant, ended: entry.ended, report: own)
            }.mapError { .ledger($0) }
        }
    }

    private static func settled(_ results: [DecisionResult?]) -> [DecisionResult] {
        results.map { $0 ?? .failure(.ledger(.invalidArgument("the decision was neither recorded nor refused"))) }
    }

    /// The row a decision writes; `--for` counts from `now`, when it is written.
    private func newGrant(_ request: DecisionRequest, now: Date) -> NewGrant {
        let expires = request.lastingSeconds.map { now.addingTimeInterval(TimeInterval($0)) } ?? request.expires
        return NewGrant(subject: request.subject, program: request.program, permission: request.permission,
                        deviceID: request.deviceID,
                        decision: request.decision, scope: request.scope, expires: expires,
                        decidedBy: request.decidedBy ?? actor, method: request.method, reason: request.reason,
                        holder: request.holder,
                        accuracy: request.accuracy)
    }

    /// The ledger's part of `decide`: the new row, and the standing allows it ends.
    func recordDecision(_ request: DecisionRequest) throws(LedgerError) -> (grant: Grant, ended: [Grant]) {
        let now = clock()
        let new = newGrant(request, now: now)
        let actor = new.decidedBy
        var ended: [Grant] = []
        let grant: Grant
        let standing = try coveredAllows(request)
        if request.decision == .allow {
            // Ended before the new row is written; a crash in between leaves the user without
            // this allow until the command is run again, never with an allow nobody decided.
            if !standing.isEmpty {
                ended = try ledger.revoke(permission: request.permission, uid: request.subject.uid,
                                          deviceID: request.deviceID, by: actor,
                                          reason: "replaced by a new grant", at: clock(), only: Set(standing.map(\.id)))
            }
            grant = try ledger.recordGrant(new, at: now)
        } else {
            // The denial is written first: from then on it wins over the allows it covers.
            grant = try ledger.recordGrant(new, at: now)
            if !standing.isEmpty {
                ended = try ledger.revoke(permission: request.permission, uid: request.subject.uid,
                                          deviceID: request.deviceID, by: actor,
                                          reason: "denied by grant \(grant.id)", at: clock(), only: Set(standing.map(\.id)))
            }
        }
        return (grant, ended)
    }

    public struct RevokeOutcome: Sendable, Hashable {
        public var revoked: [Grant]
        /// Standing allow grants for every device that still cover `--device ID` after the revoke.
        public var stillCovering: [Grant]
        public var report: EnforcementReport
    }

    /// Ends the user's allow grants (for one device when given) and removes their entries.
    public func revoke(permission: Permission, subject: Principal, deviceID: String? = nil,
                       reason: String = "", program: String? = nil) throws(EnforcementError) -> RevokeOutcome {
        let revoked: [Grant]
        do {
            try recordUnrecordedEndings()
            let only = try program.map { (path) throws(LedgerError) in
                Set(try ledger.activeGrants(uid: subject.uid, permission: permission, now: clock())
                    .filter { $0.program?.path == path }.map(\.id))
            }
            revoked = try ledger.revoke(permission: permission, uid: subject.uid, deviceID: deviceID, by: actor,
                                        reason: reason, at: clock(), only: only)
        } catch {
            throw failClosed(.revoke(permission: permission, subject: subject, deviceID: deviceID, reason: reason),
                             error) { () throws(LedgerError) -> [Grant] in
                try ledger.activeGrants(uid: subject.uid, permission: permission, now: clock()).filter {
                    $0.decision == .allow && (deviceID == nil || $0.deviceID == deviceID)
                }
            }
        }
        return try ledgerWork { () throws(LedgerError) -> RevokeOutcome in
            let report = try run(scope: [subject.uid])
            var covering: [Grant] = []
            if deviceID != nil {
                let decisions = Decisions(active: try ledger.activeGrants(uid: subject.uid, permission: permission,
                                                                          now: clock()))
                covering = decisions.grants.filter { $0.decision == .allow && $0.deviceID == nil }
            }
            return RevokeOutcome(revoked: revoked, stillCovering: covering, report: report)
        }
    }

    public struct ResetOutcome: Sendable, Hashable {
        public var deleted: [Grant]
        public var report: EnforcementReport
    }

    /// Forgets every decision of the user (for one permission or all) and removes the
    /// entries devaccess made for them; the next request asks again.
    /// `onlyOwnDecisions`: forgets only what the user decided themselves at a prompt (a
    /// user's own reset); what an administrator or the policy recorded stays.
    public func reset(subject: Principal, permission: Permission? = nil,
                      onlyOwnDecisions: Bool = false) throws(EnforcementError) -> ResetOutcome {
        let deleted: [Grant]
        do {
            try recordUnrecordedEndings()
            deleted = try ledger.reset(subject: subject, permission: permission, by: actor,
                                       onlyDecidedBySubject: onlyOwnDecisions, at: clock())
        } catch {
            // A user's own reset mostly lifts their denial, which gives access: it waits for the
            // ledger like an allow (the fail-closed record would replay as a full reset).
            if onlyOwnDecisions { throw .ledger(error) }
            throw failClosed(.reset(subject: subject, permission: permission), error) {
                () throws(LedgerError) -> [Grant] in
                try ledger.grants(uid: subject.uid, permission: permission, includeInactive: true, now: clock())
            }
        }
        return try ledgerWork { () throws(LedgerError) -> ResetOutcome in
            return ResetOutcome(deleted: deleted, report: try run(scope: [subject.uid]))
        }
    }

    /// Applies the whole ledger to the machine: ends expired grants, adds missing entries,
    /// removes devaccess's entries that no grant stands behind, and reports drift.
    public func reconcile() throws(EnforcementError) -> EnforcementReport {
        try ledgerWork { () throws(LedgerError) -> EnforcementReport in
            var report = try run(scope: nil)
            let served = Set(try ledger.grants(now: clock()).map(\.permission)).subtracting(nodePermissions)
            for permission in served.sorted() { report.notes.append(Self.serviceNote(permission)) }
            return report
        }
    }

    /// The device with `id`, if the permission has one now.
    public func requireDevice(_ id: String, permission: Permission) throws(EnforcementError) {
        let report = devices.report(for: permission)
        guard report.devices.contains(where: { $0.id == id }) else {
            throw .unknownDevice(id: id, permission: permission, known: report.devices.map(\.id),
                                 unavailable: report.unavailableReason)
        }
    }

    // MARK: - Helpers

    static func serviceNote(_ permission: Permission) -> String {
        "\(permission.rawValue): the decision is recorded, but no device node gets an ACL entry: "
            + (permission == .location
               ? "devaccessd serves location at the grant's accuracy ('devaccess location', its gpsd endpoint); "
                   + "gpsd's own port binds only when gated to devaccessd (config/nftables/devaccess-gpsd.nft)"
               : "devaccess does not enforce this permission through device nodes")
    }

    /// The ledger checks the same when it records; checked here first because a grant
    /// may end older grants before its own row is written.
    static func validateTerm(_ request: DecisionRequest, now: Date) throws(EnforcementError) {
        if let accuracy = request.accuracy, request.permission != .location || request.decision != .allow {
            throw .ledger(.invalidArgument("an accuracy (\(accuracy.rawValue)) goes with a grant of location only, "
                + "not with \(request.decision == .deny ? "a denial" : request.permission.rawValue)"))
        }
        if let seconds = request.lastingSeconds {
            guard request.scope == .duration, request.expires == nil, seconds > 0 else {
                throw .ledger(.invalidArgument("a term of \(seconds) s needs scope 'until', a positive length "
                    + "and no expiry time"))
            }
            return
        }
        switch (request.scope, request.expires) {
        case (.duration, nil):
            throw .ledger(.invalidArgument("scope 'until' needs an expiry time"))
        case (.always, _?):
            throw .ledger(.invalidArgument("scope 'always' cannot have an expiry time"))
        case (_, let expires?) where expires <= now:
            throw .ledger(.invalidArgument("the expiry time \(ISOTime.format(expires)) is not in the future"))
        default:
            break
        }
    }

    /// The user's standing allows that a new decision would end.
    /// The standing allows a decision replaces or ends: of the same device scope, and of the
    /// same program for a program grant. A user-wide denial ends program grants too (the
    /// user's every program is denied); a user-wide grant leaves them.
    private func coveredAllows(_ request: DecisionRequest) throws(LedgerError) -> [Grant] {
        try ledger.activeGrants(uid: request.subject.uid, permission: request.permission, now: clock()).filter {
            guard $0.decision == .allow, request.deviceID == nil || $0.deviceID == request.deviceID else { return false }
            if let program = request.program { return $0.program?.path == program.path }
            return request.decision == .deny || $0.program == nil
        }
    }

    private func ledgerWork<R>(_ body: () throws(LedgerError) -> R) throws(EnforcementError) -> R {
        try EnforcementError.ledgerWork(body)
    }
}

extension Enforcer.DecisionRequest {
    /// A decision for `term` from `now` (`ResolvedTerm.recorded(at:)`): a `for` ends its
    /// seconds later; a `once` lasts while `holder` runs, and until its cap at the latest.
    public init(subject: Principal, permission: Permission, decision: Decision, term: ResolvedTerm, from now: Date,
                holder: ProcessHolder?, reason: String = "", accuracy: LocationAccuracy? = nil,
                decidedBy: Principal? = nil, method: DecisionMethod = .admin) {
        let (scope, expires) = term.recorded(at: now)
        self.init(subject: subject, permission: permission, decision: decision, scope: scope, expires: expires,
                  reason: reason, holder: scope == .once ? holder : nil, accuracy: accuracy, decidedBy: decidedBy,
                  method: method)
    }
}
