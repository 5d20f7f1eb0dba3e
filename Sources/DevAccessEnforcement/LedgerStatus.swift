import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessSystem

/// What status knows about the ledger: nothing yet, its decisions, or why it cannot be read.
public enum LedgerReading: Sendable {
    /// No ledger file: nothing has been decided.
    case absent(path: String)
    case loaded(LedgerSnapshot)
    /// The file exists but cannot be used; statuses come from the nodes alone.
    case unreadable(path: String, problem: String)
    /// The ledger is private and devaccessd, which answers for it, could not be asked.
    case unknown(why: String)

    /// The file exists but the caller may not read it (the ledger is root's alone).
    public var isPrivate: Bool {
        guard case .unreadable(let path, _) = self else { return false }
        return access(path, R_OK) != 0 && (errno == EACCES || errno == EPERM)
    }
}

/// The decisions standing at one moment and the ACL entries devaccess recorded.
public struct LedgerSnapshot: Sendable {
    public var path: String
    public var decisions: Decisions
    public var records: [ACLEntryRecord]
    /// The privacy switches that are off: their permissions are `restricted` for everyone.
    public var switches: [PrivacySwitch]

    public init(path: String, decisions: Decisions, records: [ACLEntryRecord], switches: [PrivacySwitch] = []) {
        self.path = path
        self.decisions = decisions
        self.records = records
        self.switches = switches
    }

    /// The switch that has `permission` off now, if any (one whose time ran out is not).
    public func switchedOff(_ permission: Permission, now: Date = Date()) -> PrivacySwitch? {
        switches.first { $0.permission == permission && ($0.until.map { $0 > now } ?? true) }
    }
}

public enum LedgerStatus {
    /// Reads `<stateDirectory>/ledger.db` read-only, never creating or migrating it, so an
    /// unprivileged `status` works and a damaged ledger never stops status.
    public static func read(stateDirectory: String, uid: UInt32? = nil, now: Date = Date()) -> LedgerReading {
        let path = stateDirectory + "/" + Ledger.fileName
        var info = stat()
        if lstat(path, &info) != 0 && errno == ENOENT { return .absent(path: path) }
        do {
            let ledger = try Ledger(path: path, mode: .readOnly, journal: .disabled)
            let grants = try ledger.grants(uid: uid, now: now)
            let records = try ledger.aclEntries()
            return .loaded(LedgerSnapshot(path: path, decisions: Decisions(active: grants), records: records,
                                          switches: try ledger.switches()))
        } catch {
            return .unreadable(path: path, problem: error.description)
        }
    }

    /// The status of one permission with the ledger's decisions, the policy, and the
    /// drift between the ledger and the nodes. Drift appears both in `reasons` and in `drift`.
    public static func evaluate(_ report: AdapterReport, for user: UserIdentity, ledger: LedgerReading,
                                policy: PolicyReading = .loaded(Policy())) -> PermissionStatus {
        var inputs = DecisionInputs()
        var decisionReasons: [Reason] = []
        switch ledger {
        case .absent:
            break
        case .unreadable(_, let problem):
            decisionReasons.append(Reason(.ledger, "the ledger cannot be read, so decisions are not shown "
                + "and this status comes from the nodes alone: \(problem)"))
        case .unknown(let why):
            decisionReasons.append(Reason(.ledger, "decisions unknown: \(why); this status comes from the nodes "
                + "and the policy alone"))
        case .loaded(let snapshot):
            let (fromLedger, ledgerReasons) = snapshot.decisions.inputs(user: user, report: report)
            inputs = fromLedger
            decisionReasons += ledgerReasons
        }
        switch policy {
        case .loaded(let rules):
            inputs.policyRestriction = rules.restriction(for: report.permission, user: user)
        case .unreadable(let problem):
            // devaccessd keeps the last policy that parsed in force (PolicyKeeper): say so, or a
            // broken edit reads as a policy that restricts nothing.
            decisionReasons.append(Reason(.policy, "the policy cannot be read, so this status shows no restriction "
                + "from it; devaccessd, while it runs, keeps enforcing the last policy that parsed: \(problem)"))
        }
        // A privacy switch outranks the policy: it is what an administrator said last, for everyone.
        if case .loaded(let snapshot) = ledger, let off = snapshot.switchedOff(report.permission) {
            inputs.policyRestriction = Reason(.ledger, off.sentence(formatTime: ISOTime.format))
        }
        var status = StatusEvaluator.evaluate(report, for: user, inputs: inputs)
        status.reasons.insert(contentsOf: decisionReasons, at: min(1, status.reasons.count))
        if report.permission == .location { applyAccuracy(&status, for: user, ledger: ledger, policy: policy) }
        let drift: [DriftItem]
        switch ledger {
        case .absent(let path):
            status.reasons.append(Reason(.ledger, "no ledger at \(path): nothing has been decided"))
            drift = policyDrift(report, for: user, restriction: inputs.policyRestriction)
        case .unreadable, .unknown:
            drift = policyDrift(report, for: user, restriction: inputs.policyRestriction)
        case .loaded(let snapshot):
            drift = DriftAnalyzer.drift(report: report, user: user, decisions: snapshot.decisions,
                                        records: snapshot.records, restriction: inputs.policyRestriction)
        }
        status.drift = drift.map(\.reason)
        status.reasons.append(contentsOf: status.drift)
        return status
    }
}

extension LedgerStatus {
    /// Location is told at a level: below exact, access the nodes and gpsd give in full is
    /// still only `limited`, and the first reason says the level. Only where the decisions
    /// and the policy are known; the level is what `Enforcer.locationAccuracy` serves.
    static func applyAccuracy(_ status: inout PermissionStatus, for user: UserIdentity, ledger: LedgerReading,
                              policy: PolicyReading) {
        let gated = StatusEvaluator.onlyThroughTheBroker(status.devices)
        guard status.status == .authorized || status.status == .limited || (gated && status.status == .notDetermined),
              case .loaded(let rules) = policy else { return }
        let decisions: Decisions
        switch ledger {
        case .absent: decisions = .empty
        case .loaded(let snapshot): decisions = snapshot.decisions
        case .unreadable, .unknown: return
        }
        let outcome = LocationLevel.evaluate(user: user, decisions: decisions, policy: rules, switchedOff: nil)
        guard let level = outcome.accuracy, let summary = LocationLevel.summary(outcome, user: user) else { return }
        status.accuracy = level
        guard gated else {
            // gpsd (or a receiver's node) gives this user exact positions without devaccessd:
            // the level is recorded but does not bind yet; status says what the user can do.
            status.reasons.insert(Reason(.summary, summary + "; but the level does not bind while "
                + "\(user.name) can reach the receiver without devaccessd (see below)"), at: min(1, status.reasons.count))
            return
        }
        if level < .exact {
            status.status = .limited
            status.reasons.insert(Reason(.summary, summary), at: 0)
        } else {
            status.status = .authorized
            status.reasons.insert(Reason(.summary, summary), at: 0)
        }
    }

    /// Without the ledger's decisions, the one drift the nodes and the policy alone show:
    /// the policy forbids the permission, yet the user can open a node.
    static func policyDrift(_ report: AdapterReport, for user: UserIdentity, restriction: Reason?) -> [DriftItem] {
        guard let restriction else { return [] }
        return DriftAnalyzer.drift(report: report, user: user, decisions: .empty, records: [], restriction: restriction)
    }
}

extension LedgerStatus {
    /// devaccessd's status while the policy files do not parse: the policy shown is the last
    /// one that parsed, which it enforces; say so, or the status reads as if the files were fine.
    public static func tellLastGoodPolicy(_ status: inout PermissionStatus, problem: String) {
        status.reasons.insert(Reason(.policy, "the policy files do not parse, so devaccessd enforces the last policy "
            + "that parsed (this status shows it) until they are fixed: \(problem)"), at: min(1, status.reasons.count))
    }
}

/// The policy as status sees it: loaded, or why it could not be.
public enum PolicyReading: Sendable {
    case loaded(Policy)
    /// A broken configuration never stops status; it is said in the reasons.
    case unreadable(problem: String)

    /// Reads devaccess.conf and its drop-ins from `directory`.
    public static func read(directory: String) -> PolicyReading {
        do {
            return .loaded(try PolicyFiles.load(directory: directory))
        } catch {
            return .unreadable(problem: error.description)
        }
    }
}
