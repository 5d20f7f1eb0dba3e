import DevAccessSystem
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger

/// The standing user-wide decisions of the ledger, and which one applies to a device.
///
/// Rule: the newest active decision whose device matches wins (a grant without a device
/// covers every device of the permission). So `deny camera` after `grant camera --device X`
/// denies X too, and a later `grant --device X` lets X in again while the rest stays denied.
/// Program grants (for `devaccess run`) and `once` grants without a process are enforced
/// through the run's group, not user ACL entries, so they are left out here. A `once` grant
/// of a request names the process it lasts for (`holder`) and is a user grant while it runs.
public struct Decisions: Sendable {
    /// Newest first (created, then id).
    public let grants: [Grant]
    /// Program grants (`devaccess run`), newest first: shown as reasons, never applied to the user.
    public let programGrants: [Grant]

    public init(active grants: [Grant]) {
        let sorted = grants.sorted { ($0.created, $0.id) > ($1.created, $1.id) }
        self.grants = sorted.filter { $0.program == nil && ($0.scope != .once || $0.holder != nil) }
        programGrants = sorted.filter { $0.program != nil }
    }

    public static let empty = Decisions(active: [])

    /// The decision that applies to `uid` on device `deviceID` of `permission`, if any.
    public func decision(uid: UInt32, permission: Permission, deviceID: String) -> Grant? {
        grants.first { $0.subject.uid == uid && $0.permission == permission && ($0.deviceID == nil || $0.deviceID == deviceID) }
    }

    /// Every user with a standing decision about `permission` (or any permission).
    public func subjects(permission: Permission? = nil) -> Set<UInt32> {
        Set(grants.filter { permission == nil || $0.permission == permission }.map(\.subject.uid))
    }

    public func grants(uid: UInt32, permission: Permission) -> [Grant] {
        grants.filter { $0.subject.uid == uid && $0.permission == permission }
    }

    /// What the ledger says for `user` about the devices in `report`, for `StatusEvaluator`,
    /// and one `.ledger` reason per standing decision.
    ///
    /// The status is `denied` when at least one present device is denied, none is allowed,
    /// and the user cannot use any undecided device now; a denial of one camera does not
    /// hide a second camera the user really can use (that is `limited`, with the denial as
    /// a reason). Access the nodes give to a denied device is drift, not a reason to change
    /// the status.
    public func inputs(user: UserIdentity, report: AdapterReport) -> (DecisionInputs, [Reason]) {
        let uid = user.uid
        let standing = grants(uid: uid, permission: report.permission)
        let programReasons = programGrants.filter { $0.subject.uid == uid && $0.permission == report.permission }
            .map { grant in
                Reason(.ledger, "grant \(grant.id) \(grant.decision == .allow ? "allows" : "denies") "
                    + "\(report.permission.rawValue) to \(grant.program?.path ?? "a program") run by \(user.name) with "
                    + "'devaccess run' only, not to \(user.name)'s other programs (" + Self.terms(grant) + ")")
            }
        var inputs = DecisionInputs()
        // Programs allowed through 'devaccess run' only, each once: the summary names them.
        var named = Set<String>()
        inputs.programAllows = programGrants.filter { $0.subject.uid == uid && $0.permission == report.permission
            && $0.decision == .allow }.compactMap(\.program?.path).filter { named.insert($0).inserted }
        guard !standing.isEmpty else { return (inputs, programReasons) }
        let effective = report.devices.map { decision(uid: uid, permission: report.permission, deviceID: $0.id) }
        let allowed = effective.compactMap { $0 }.filter { $0.decision == .allow }
        let denied = effective.compactMap { $0 }.filter { $0.decision == .deny }
        let undecidedUsable = zip(report.devices, effective).contains { device, grant in
            grant == nil && Self.usable(device, by: user)
        }
        var seen = Set<String?>()
        inputs.ledgerAllows = allowed.map(\.deviceID).filter { seen.insert($0).inserted }
        let wholeDenial = standing.first { $0.decision == .deny && $0.deviceID == nil }
        if allowed.isEmpty, !undecidedUsable, let newest = denied.first ?? (report.devices.isEmpty ? wholeDenial : nil) {
            inputs.ledgerDenial = Reason(.ledger, "\(user.name) is denied \(report.permission.rawValue): "
                + Self.describe(newest))
        }
        let presentIDs = Set(report.devices.map(\.id))
        let effectiveIDs = Set(effective.compactMap { $0?.id })
        var reasons: [Reason] = []
        for grant in standing {
            var text = "grant \(grant.id) \(grant.decision == .allow ? "allows" : "denies") \(user.name) "
                + "\(report.permission.rawValue) on " + (grant.deviceID.map { "device \($0)" } ?? "every device")
                + " (" + Self.terms(grant) + ")"
            if let device = grant.deviceID, !presentIDs.contains(device) {
                text += "; that device is not present now"
            } else if !effectiveIDs.contains(grant.id) && !report.devices.isEmpty {
                text += "; a newer decision overrides it"
            }
            reasons.append(Reason(.ledger, text))
        }
        return (inputs, reasons + programReasons)
    }

    /// Whether the user can use the device now, the way `StatusEvaluator` decides it.
    static func usable(_ device: Device, by user: UserIdentity) -> Bool {
        switch device.route {
        case .service(let service):
            // Open to all, or a node (a receiver's serial port) the user can read around the gate.
            return service.openToAllLocalUsers || device.nodes.contains { node in
                node.facts.map { AccessEvaluator.permits(node.required, on: $0, for: user) } ?? false
            }
        case .nodes:
            return !device.nodes.isEmpty && device.nodes.allSatisfy { node in
                node.facts.map { AccessEvaluator.permits(node.required, on: $0, for: user) } ?? false
            }
        }
    }

    /// "grant 7 (deny, always; decided by root (0) via admin on 2026-11-29T10:00:00Z)".
    public static func describe(_ grant: Grant) -> String {
        "grant \(grant.id) (\(grant.decision.rawValue), \(terms(grant)))"
    }

    /// "until 2026-12-01T00:00:00Z; decided by root (0) via admin on ...", plus the reason.
    public static func terms(_ grant: Grant) -> String {
        var text = grant.scope == .always ? "always" : grant.expires.map { "until \(ISOTime.format($0))" } ?? grant.scope.recordedName
        if let holder = grant.holder { text = "once, while process \(holder.pid) runs" }
        text += "; decided by \(grant.decidedBy) via \(grant.method.rawValue) on \(ISOTime.format(grant.created))"
        if !grant.reason.isEmpty { text += ": \(grant.reason)" }
        return text
    }
}
