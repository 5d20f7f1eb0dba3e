import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessACL

/// Privacy switches: a permission off for everyone.
///
/// Off: the pass treats every grant of the permission as if it did not stand, so the
/// ordinary removal path takes devaccess's user and run entries off its nodes (grant rows
/// stay: they apply again when it is back on). `--hard` then saves each capture node's
/// remaining access (the ledger row first) and strips it; a node found with access again
/// (udev re-applied its rules, a replug, a crash between save and strip) is stripped again,
/// keeping what was saved first. On: the switch row goes first, then each saved node is put
/// back before the pass re-adds devaccess's entries, and its row is dropped after. So a
/// crash anywhere converges on the next run to whatever the switch row says.
extension Enforcer {
    public struct SwitchOrder: Sendable, Hashable {
        public var permission: Permission
        public var off: Bool
        public var hard: Bool
        public var reason: String
        public var until: Date?

        public init(permission: Permission, off: Bool, hard: Bool = false, reason: String = "", until: Date? = nil) {
            self.permission = permission
            self.off = off
            self.hard = hard
            self.reason = reason
            self.until = until
        }
    }

    public struct SwitchOutcome: Sendable, Hashable {
        /// Every switch that is off after the change.
        public var switches: [PrivacySwitch]
        /// False when the switch already was in the state asked for.
        public var changed: Bool
        public var report: EnforcementReport
    }

    /// Records the switch, then runs a full pass (it concerns everyone).
    public func setSwitch(_ order: SwitchOrder) throws(EnforcementError) -> SwitchOutcome {
        let now = clock()
        if let until = order.until, until <= now {
            throw .ledger(.invalidArgument("the switch's end \(ISOTime.format(until)) is not in the future"))
        }
        return try EnforcementError.ledgerWork { () throws(LedgerError) -> SwitchOutcome in
            let changed: Bool
            if order.off {
                let before = try ledger.switches().first { $0.permission == order.permission }
                try ledger.recordSwitchOff(PrivacySwitch(permission: order.permission, hard: order.hard, by: actor,
                                                         since: before?.since ?? now, until: order.until,
                                                         reason: order.reason))
                changed = before?.hard != order.hard || before?.until != order.until || before?.reason != order.reason
            } else {
                changed = try ledger.recordSwitchOn(order.permission, by: actor,
                                                    why: "turned on by \(actor.name)" + (order.reason.isEmpty ? "" : ": \(order.reason)"),
                                                    at: now)
            }
            let report = try run(scope: nil)
            return SwitchOutcome(switches: try ledger.switches(), changed: changed, report: report)
        }
    }

    /// The switches that are off, after turning on those whose time ran out.
    func switchesInForce(_ report: inout EnforcementReport) throws(LedgerError) -> [PrivacySwitch] {
        let now = clock()
        var off: [PrivacySwitch] = []
        for state in try ledger.switches() {
            if let until = state.until, until <= now {
                if try ledger.recordSwitchOn(state.permission, by: actor, why: "its time ran out (--for)", at: now) {
                    report.switchesEnded.append(state)
                }
            } else {
                off.append(state)
            }
        }
        return off
    }

    /// Puts back the saved access of nodes whose permission is no longer switched off hard.
    /// Before the pass, so devaccess's entries are added to the restored ACL, not wiped by it.
    func restoreSavedAccess(keepingOff hardOff: Set<Permission>, _ report: inout EnforcementReport) throws(LedgerError) {
        for saved in try ledger.savedNodeAccess() where !hardOff.contains(saved.permission) {
            let access = NodeLockdown.SavedAccess(mode: saved.mode, uid: saved.ownerUID, gid: saved.groupGID,
                                                  aclText: saved.aclText)
            func change(_ action: EnforcementChange.Action, _ message: String) {
                report.changes.append(EnforcementChange(action: action, nodePath: saved.nodePath, uid: actor.uid,
                                                        userName: actor.name, permission: saved.permission,
                                                        deviceID: saved.deviceID, grantID: nil, message: message))
            }
            let outcome = Result { () throws(ACLWriter.WriteError) in
                try NodeLockdown.restore(access, path: saved.nodePath, major: saved.major, minor: saved.minor)
            }
            switch outcome {
            case .success:
                CrashPoint.afterACLEdit.hit(testCrashAt)
                try ledger.recordNodeAccessRestored(saved, outcome: "restored", by: actor, at: clock())
                change(.accessRestored, "put back \(saved.nodePath)'s access (\(access.summary)): "
                    + "\(saved.permission.rawValue) is switched on")
            case .failure(.vanished):
                try ledger.recordNodeAccessRestored(saved, outcome: "the node is gone; udev sets up a new one afresh",
                                                    by: actor, at: clock())
                change(.recordDropped, "dropped the saved access of \(saved.nodePath): the node is gone, and udev sets "
                    + "up a new one afresh")
            case .failure(let error) where error.isWrongDevice || error.isNotCharacterDevice:
                try ledger.recordNodeAccessRestored(saved, outcome: "not put back: \(error.description)", by: actor,
                                                    at: clock())
                change(.recordDropped, "dropped the saved access of \(saved.nodePath): \(error.description)")
            case .failure(let error):
                // Kept: the next run tries again.
                report.problems.append(EnforcementProblem(
                    kind: .failed, nodePath: saved.nodePath, uid: actor.uid, userName: actor.name,
                    permission: saved.permission, deviceID: saved.deviceID,
                    message: "\(saved.nodePath): could not put back its saved access: \(error.description)"))
            }
        }
    }

    /// Saves and takes away everyone's access on the capture nodes of `hardOff` permissions.
    /// After the pass, so what is saved is others' access, not devaccess's own entries.
    /// `only`: a hotplug pass locks down the selected nodes' devices.
    func lockDown(_ hardOff: [PrivacySwitch], only selection: NodeSelection? = nil,
                  _ report: inout EnforcementReport) throws(LedgerError) {
        guard !hardOff.isEmpty else { return }
        var saved = Dictionary(try ledger.savedNodeAccess().map { ($0.nodePath, $0) }, uniquingKeysWith: { a, _ in a })
        let records = try ledger.aclEntries()
        for state in hardOff {
            let permissionReport = selection.map { devices.report(for: state.permission, nodes: $0.paths) }
                ?? devices.report(for: state.permission)
            for device in permissionReport.devices where device.route == .nodes {
                for node in device.nodes {
                    guard case .present(let facts) = node.state else { continue }
                    if let earlier = saved[node.path], earlier.major != facts.major || earlier.minor != facts.minor {
                        // Another device has this path now: what was saved belonged to the old one.
                        try ledger.recordNodeAccessRestored(earlier, outcome: "not put back: the path names "
                            + "\(facts.major):\(facts.minor) now", by: actor, at: clock())
                        saved[node.path] = nil
                    }
                    if saved[node.path] == nil {
                        let now: NodeLockdown.SavedAccess
                        switch Result(catching: { () throws(ACLWriter.WriteError) in
                            try NodeLockdown.read(path: node.path, major: facts.major, minor: facts.minor)
                        }) {
                        case .success(let read): now = read
                        case .failure(let error):
                            lockDownProblem(node.path, device: device, error: error, &report)
                            continue
                        }
                        let own = records.filter { $0.nodePath == node.path }.map(\.qualifier)
                        let entry = SavedNodeAccess(nodePath: node.path, permission: state.permission,
                                                    deviceID: device.id, major: facts.major, minor: facts.minor,
                                                    mode: now.mode, ownerUID: now.uid, groupGID: now.gid,
                                                    aclText: Self.withoutOwnEntries(now.aclText, own), saved: clock())
                        try ledger.recordNodeAccessSaved(entry, by: actor)
                        saved[node.path] = entry
                        CrashPoint.afterLedgerWrite.hit(testCrashAt)
                    }
                    switch Result(catching: { () throws(ACLWriter.WriteError) in
                        try NodeLockdown.strip(path: node.path, major: facts.major, minor: facts.minor)
                    }) {
                    case .success(true): break
                    case .success(false): continue
                    case .failure(let error):
                        lockDownProblem(node.path, device: device, error: error, &report)
                        continue
                    }
                    CrashPoint.afterACLEdit.hit(testCrashAt)
                    report.changes.append(EnforcementChange(
                        action: .accessTaken, nodePath: node.path, uid: actor.uid, userName: actor.name,
                        permission: state.permission, deviceID: device.id, grantID: nil,
                        message: "took every user's and group's access away from \(node.path) "
                            + "(\(state.permission.rawValue) \(device.name) is switched off --hard; saved: "
                            + "\(saved[node.path].map { "\(String($0.mode, radix: 8)) \($0.ownerUID):\($0.groupGID)" } ?? "-"))"))
                }
            }
        }
    }

    private func lockDownProblem(_ path: String, device: Device, error: ACLWriter.WriteError,
                                 _ report: inout EnforcementReport) {
        if case .vanished = error { return }
        report.problems.append(EnforcementProblem(
            kind: error.isWrongDevice || error.isNotCharacterDevice ? .refused : .failed, nodePath: path,
            uid: actor.uid, userName: actor.name, permission: device.permission, deviceID: device.id,
            message: "\(path): could not switch off: \(error.description)"))
    }

    /// The saved ACL without entries devaccess has records for (a removal that failed in the
    /// pass): putting those back would leave an entry with no record.
    static func withoutOwnEntries(_ text: String?, _ own: [ACLEntryRecord.Qualifier]) -> String? {
        guard let text, !own.isEmpty else { return text }
        let prefixes = own.map { qualifier -> String in
            switch qualifier {
            case .user(let uid): return "user:\(uid):"
            case .group(let gid): return "group:\(gid):"
            }
        }
        return text.split(separator: "\n").filter { line in !prefixes.contains { line.hasPrefix($0) } }
            .joined(separator: "\n")
    }
}
