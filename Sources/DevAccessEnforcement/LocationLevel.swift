import DevAccessSystem
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger

/// How precisely a user may be told where the machine is: from their standing decisions,
/// the policy and the privacy switch. One rule for status and for the broker that serves
/// location (`Enforcer.locationAccuracy`), so what status says is what is served.
///
/// Nothing when location is switched off, the policy forbids it, or the newest user-wide
/// decision is a denial; else the finest standing allow (user grants only: a program grant
/// is for `devaccess run`), or the policy's `Allow` without a grant; either capped by the
/// policy's `MaxAccuracy=`.
public enum LocationLevel {
    public enum Outcome: Sendable, Hashable {
        /// No location for the user; the sentence says why.
        case none(String)
        /// Location at this level; the sentence says what gives it ("granted at city
        /// accuracy, about 10 km (grant 7)").
        case level(LocationAccuracy, String)

        public var accuracy: LocationAccuracy? {
            if case .level(let level, _) = self { return level }
            return nil
        }
    }

    /// `decisions`: the standing decisions (any users'; the user's are picked). `policy` nil:
    /// none applies (no cap, no policy allow).
    public static func evaluate(user: UserIdentity, decisions: Decisions, policy: Policy?,
                                switchedOff: PrivacySwitch?) -> Outcome {
        if let off = switchedOff {
            return .none("location is " + off.sentence(formatTime: ISOTime.format))
        }
        let decision = policy?.decision(for: .location, user: user)
        if let decision, decision.action == .deny {
            return .none(decision.explanation(.location, user: user))
        }
        // Newest first: allows recorded after the newest user-wide denial stand; the denial
        // ends everything older.
        var allows: [Grant] = []
        var denial: Grant?
        for grant in decisions.grants(uid: user.uid, permission: .location) {
            if grant.decision == .deny {
                if grant.deviceID == nil {
                    denial = grant
                    break
                }
                continue
            }
            allows.append(grant)
        }
        let finest = allows.compactMap { grant in grant.locationLevel.map { (grant, $0) } }.max { $0.1 < $1.1 }
        if let (grant, level) = finest {
            return capped(level, by: decision, "granted", source: "grant \(grant.id)")
        }
        if let denial {
            return .none("\(user.name) is denied location: " + Decisions.describe(denial))
        }
        if let decision, decision.action == .allow {
            return capped(.exact, by: decision, "allowed by policy", source: decision.origin.map { "\($0)" }
                          ?? "built-in default")
        }
        return .none("no standing grant gives \(user.name) location")
    }

    private static func capped(_ level: LocationAccuracy, by decision: PolicyDecision?, _ verb: String,
                               source: String) -> Outcome {
        let served = decision?.capping(level) ?? level
        var text = "\(verb) at \(served.rawValue) accuracy, \(served.approximately) (\(source)"
        if served < level, let cap = decision?.accuracyCap {
            text += "; \(level.rawValue) capped by the policy's \(cap)"
        }
        return .level(served, text + ")")
    }

    /// The status sentence for a level: "granted at city accuracy, about 10 km (grant 7)".
    public static func summary(_ outcome: Outcome, user: UserIdentity) -> String? {
        guard case .level(_, let text) = outcome else { return nil }
        return "\(user.name) is told this computer's location \(text)"
    }
}

extension Enforcer {
    /// How precisely `subject` may be told where the machine is now; nil when not at all (no
    /// allow grant and no policy allow, a denial, the policy forbids it, location switched
    /// off). The level is the finest standing user grant of location (program grants are
    /// for `devaccess run` only; a `once` grant whose process is gone does not count), else
    /// the policy's `Allow`, capped by `MaxAccuracy=`. What the location service serves.
    /// Throws when the ledger cannot be read or the policy does not parse (fail closed).
    public func locationAccuracy(for subject: Principal) throws(EnforcementError) -> LocationAccuracy? {
        let now = clock()
        let (grants, switches) = try EnforcementError.ledgerWork {
            () throws(LedgerError) -> ([Grant], [PrivacySwitch]) in
            (try ledger.activeGrants(uid: subject.uid, permission: .location, now: now), try ledger.switches())
        }
        let (policy, problem) = policyInForce()
        if let problem { throw .policyUnreadable(problem) }
        // Not a grant whose revoke, deny or reset the ledger could not record yet (its row stands).
        let withheld = unrecorded.withheld
        let standing = grants.filter { grant in
            !withheld.contains(grant.id) && (grant.holder.map { ProcessLiveness.gone($0) == nil } ?? true)
        }
        let off = switches.first { $0.permission == .location && ($0.until.map { $0 > now } ?? true) }
        return LocationLevel.evaluate(user: identity(subject), decisions: Decisions(active: standing), policy: policy,
                                      switchedOff: off).accuracy
    }
}

extension Enforcer {
    /// The location level of each live `devaccess run` of `subject` that was given location,
    /// by the run's group id: the run's decision (`RunDecisions`: a program grant of its
    /// program or a `once` grant of its process; a newer user-wide denial ends it) when it
    /// allows, capped by the policy's `MaxAccuracy=`. Empty when location is switched off or
    /// the policy forbids it for the user. What the gpsd endpoint serves a connection that
    /// only that run's processes hold.
    public func runLocationAccuracies(for subject: Principal) throws(EnforcementError) -> [UInt32: LocationAccuracy] {
        let now = clock()
        let (runs, grants, switches) = try EnforcementError.ledgerWork {
            () throws(LedgerError) -> ([Run], [Grant], [PrivacySwitch]) in
            let runs = try ledger.runs(uid: subject.uid).filter { $0.permissions.contains(.location) && $0.process != nil }
            guard !runs.isEmpty else { return ([], [], []) }
            return (runs, try ledger.activeGrants(uid: subject.uid, permission: .location, now: now), try ledger.switches())
        }
        guard !runs.isEmpty else { return [:] }
        let (policy, problem) = policyInForce()
        if let problem { throw .policyUnreadable(problem) }
        if switches.contains(where: { $0.permission == .location && ($0.until.map { $0 > now } ?? true) }) { return [:] }
        let decision = policy?.decision(for: .location, user: identity(subject))
        if decision?.action == .deny { return [:] }
        let withheld = unrecorded.withheld
        let decisions = RunDecisions(active: grants.filter { grant in
            !withheld.contains(grant.id) && (grant.holder.map { ProcessLiveness.gone($0) == nil } ?? true)
        })
        var levels: [UInt32: LocationAccuracy] = [:]
        for run in runs {
            guard let grant = decisions.decision(for: run, permission: .location, deviceID: nil),
                  grant.program != nil, let level = grant.locationLevel else { continue }
            levels[run.gid] = decision?.capping(level) ?? level
        }
        return levels
    }
}
