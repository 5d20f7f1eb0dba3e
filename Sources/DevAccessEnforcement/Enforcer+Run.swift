import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessACL

extension Enforcer {
    /// One engine pass for the users in `scope` (nil = everyone): end expired grants (of
    /// everyone), make the nodes agree with the ledger, then look for drift on the nodes as
    /// they are afterwards.
    ///
    /// `nodes` limits the node work to the devices owning those nodes and the records at
    /// those paths (a hotplug event): the same steps as the full pass, on less. The ledger
    /// steps that end something (expiry, an exited `once` holder, a vanished run, the
    /// policy, a switch's time running out) still look at everything; when one of them ends
    /// anything, the pass widens to every device, since the ended grant's entries are on
    /// other nodes too.
    func run(scope: Set<UInt32>?, nodes: NodeSelection? = nil) throws(LedgerError) -> EnforcementReport {
        var report = EnforcementReport()
        // Endings a locked or full ledger refused come first: until they are recorded, the
        // grants they end are not applied (below), and a run that cannot record them fails.
        try recordUnrecordedEndings()
        report.expired = try endGrantsWhoseTermIsOver()
        try endVanishedRuns(&report)
        // Read once: the whole run applies one policy.
        let (policy, policyProblem) = policyInForce()
        if let policyProblem {
            report.notes.append("the policy does not parse, so it was not applied in this run: \(policyProblem)")
        }
        // A run about some users checks their grants; a full run (policy change, periodic) everyone's.
        if let policy { try endGrantsPolicyForbids(policy, of: scope, &report) }
        // Users whose grants just ended get their entries removed in this same pass.
        let uids = scope.map { $0.union(report.expired.map(\.subject.uid) + report.endedByPolicy.map(\.grant.subject.uid)) }
        // A permission switched off for everyone: its grants do not stand while it is off.
        let switchedOff = try switchesInForce(&report)
        let hardOff = switchedOff.filter(\.hard)
        try restoreSavedAccess(keepingOff: Set(hardOff.map(\.permission)), &report)
        // Something ended (or was put back) for everyone: its entries may be on any node.
        let selection = report.changedNothing && report.runsEnded.isEmpty && report.switchesEnded.isEmpty
            ? nodes : nil
        let reports = probe(selection)
        let covered = Self.coveredPaths(selection, reports)
        let off = Set(switchedOff.map(\.permission))
        let standing = try ledger.grants(now: clock())
            .filter { !unrecorded.withheld.contains($0.id) && !off.contains($0.permission) }
        let decisions = Decisions(active: standing)
        let records = try ledger.aclEntries().filter { record in
            // Group entries belong to `devaccess run`; user entries outside the scope wait their turn.
            guard case .user(let uid) = record.qualifier, covered?.contains(record.nodePath) ?? true else { return false }
            return uids?.contains(uid) ?? true
        }
        var pass = ApplyPass(enforcer: self, decisions: decisions, reports: reports, report: report)
        try pass.apply(records: records, uids: uids)
        report = pass.report
        // The apply pass edits ACL entries only: the grants read above still stand.
        try applyRunAccess(active: standing, reports: reports, only: selection?.paths, &report)
        try lockDown(hardOff, only: selection, &report)
        report.drift += try driftAfterThePass(selection: selection, reports: reports, covered: covered, uids: uids,
                                              decisions: decisions, policy: policy, told: report.drift)
        return report
    }

    /// Ends the grants whose term is over: their time ran out, or, for a `once` grant, its
    /// process exited (or its pid now names another process, or belongs to another boot).
    /// Fail closed: a grant that is over loses its entries even when the ledger cannot be
    /// written now (disk full, I/O error); the records stay, so the next run that can write
    /// records the ending and finds the entries gone.
    private func endGrantsWhoseTermIsOver() throws(LedgerError) -> [Grant] {
        var ended: [Grant] = []
        let due = try ledger.expiredUnrevoked(now: clock())
        if !due.isEmpty {
            do {
                ended = try ledger.markExpired(due.map(\.id), by: actor, at: clock())
            } catch {
                removeEntriesFailingClosed(of: due)
                throw error
            }
        }
        let orphaned = try ledger.grants(now: clock()).compactMap { grant -> (grant: Grant, reason: String)? in
            guard let holder = grant.holder, let gone = ProcessLiveness.gone(holder) else { return nil }
            return (grant, gone)
        }
        guard !orphaned.isEmpty else { return ended }
        do {
            return ended + (try ledger.endWithProcess(orphaned.map { ($0.grant.id, $0.reason) }, by: actor, at: clock()))
        } catch {
            removeEntriesFailingClosed(of: orphaned.map(\.grant))
            throw error
        }
    }

    /// The paths a node pass covers: each selected device whole, so the records on its other
    /// nodes (a sound card's control node beside the PCM node the event named) are read too,
    /// or devaccess's own entries there would look like drift. nil: every path (a full pass).
    private static func coveredPaths(_ selection: NodeSelection?, _ reports: [AdapterReport]) -> Set<String>? {
        selection.map { selection in
            selection.paths.union(reports.flatMap { $0.devices.flatMap { $0.nodes.map(\.path) } })
        }
    }

    /// Drift on the nodes as the pass left them: who can still get in that the ledger or the
    /// policy says should not, and entries nobody granted. Drift the pass found while editing
    /// (`told`: an entry that appeared between probe and edit) is not repeated, nor
    /// contradicted by a probe that predates it.
    private func driftAfterThePass(selection: NodeSelection?, reports: [AdapterReport], covered: Set<String>?,
                                   uids: Set<UInt32>?, decisions: Decisions, policy: Policy?,
                                   told drift: [DriftItem]) throws(LedgerError) -> [DriftItem] {
        let told = Set(drift.map { ApplyPass.Key(path: $0.nodePath, uid: $0.uid) })
        // A node pass looks at its devices' nodes again (their ACLs changed) without asking
        // udev again: the devices are those of a moment ago, their nodes examined anew, and a
        // node no longer the one udev gave is untrusted as it would be in a fresh probe.
        let fresh = selection == nil ? probe(nil) : reports.map(Self.reexamined)
        let freshRecords = try ledger.aclEntries().filter { covered?.contains($0.nodePath) ?? true }
        var subjects = DriftAnalyzer.subjects(reports: fresh, decisions: decisions, records: freshRecords)
        // Who else may still get in where the policy forbids it: owners, group members, named users
        // (a run about some users looks at just them).
        if let policy { subjects.formUnion(uids ?? policySubjects(policy, fresh)) }
        if let uids { subjects.formIntersection(uids) }
        var found: [DriftItem] = []
        for uid in subjects.sorted() {
            let user = identities(uid)
                ?? UserIdentity(uid: uid, name: String(uid), primaryGID: UInt32.max, groups: [])
            for permissionReport in fresh {
                found += DriftAnalyzer.drift(report: permissionReport, user: user, decisions: decisions,
                                             records: freshRecords,
                                             restriction: policy?.restriction(for: permissionReport.permission, user: user))
                    .filter { !told.contains(ApplyPass.Key(path: $0.nodePath, uid: $0.uid)) }
            }
        }
        return found
    }

    /// The same devices with each present node examined again (same path, same numbers).
    static func reexamined(_ report: AdapterReport) -> AdapterReport {
        var report = report
        for index in report.devices.indices {
            for node in report.devices[index].nodes.indices {
                let was = report.devices[index].nodes[node]
                guard case .present(let facts) = was.state else { continue }
                report.devices[index].nodes[node].state = NodeVerification.state(was.path, major: facts.major,
                                                                                 minor: facts.minor)
            }
        }
        return report
    }

    /// The node-gated permissions' devices: all of them, or those owning a selected node.
    func probe(_ selection: NodeSelection?) -> [AdapterReport] {
        guard let selection else { return nodePermissions.map { devices.report(for: $0) } }
        return nodePermissions.map { permission in
            guard selection.permissions?.contains(permission) ?? true, !selection.paths.isEmpty else {
                return AdapterReport(permission: permission, devices: [])
            }
            return devices.report(for: permission, nodes: selection.paths)
        }
    }

    /// A hotplug event's pass: the ledger applied to the devices owning the `selection`'s
    /// nodes (see `run(scope:nodes:)`), with the same records, ACL edits, audit events and
    /// drift the full reconcile would make for them, and nothing done to other nodes (the
    /// periodic and other full reconciles remain the safety net for those). A path that is
    /// no device's node, or where something other than the device's node stands now (a
    /// symlink, a FIFO, other device numbers), is not followed: the pass refuses it as the
    /// full one does.
    public func applyNodes(_ selection: NodeSelection) throws(EnforcementError) -> EnforcementReport {
        try EnforcementError.ledgerWork { () throws(LedgerError) -> EnforcementReport in
            try run(scope: nil, nodes: selection)
        }
    }
}

extension Enforcer {
    /// Removes the ACL entries recorded for `grants` without writing the ledger: for ending
    /// access when the ledger cannot record it. Reading still works on a full disk.
    func removeEntriesFailingClosed(of grants: [Grant]) {
        let ids = Set(grants.map(\.id))
        guard let records = try? ledger.aclEntries() else { return }
        for record in records {
            guard let grant = record.grantID, ids.contains(grant) else { continue }
            switch record.qualifier {
            case .user(let uid):
                _ = try? ACLWriter.removeUserEntry(path: record.nodePath, expectedMajor: record.major,
                                                   expectedMinor: record.minor, uid: uid)
            case .group(let gid) where RunGroups.contains(gid):
                // A run's entry under a program grant that ended.
                _ = try? ACLWriter.removeEntry(.group(gid), path: record.nodePath, expectedMajor: record.major,
                                               expectedMinor: record.minor)
            case .group:
                break
            }
        }
    }
}

/// Makes the nodes agree with the decisions, one (node, user) pair at a time.
///
/// Order, so that a crash anywhere converges on the next run and devaccess never holds an
/// entry it has no record of:
/// - add: record the entry (intent) -> edit the ACL. A crash in between leaves a record
///   without an entry, which the next pass re-adds (or removes, if the grant ended).
/// - remove: the grant row was ended first (revoke, expiry, reset) -> edit the ACL ->
///   drop the record. A crash in between leaves a record without an entry, which the next
///   pass drops.
/// An entry on a node without a record is not devaccess's: reported as drift, never changed.
/// That holds for one that appears between the probe and the edit too: a missing entry is
/// added create-only, and one found there at the edit is left alone and its intent record
/// dropped.
struct ApplyPass {
    let enforcer: Enforcer
    let decisions: Decisions
    let reports: [AdapterReport]
    var report: EnforcementReport

    private var ledger: Ledger { enforcer.ledger }

    struct Key: Hashable {
        var path: String
        var uid: UInt32
    }

    mutating func apply(records: [ACLEntryRecord], uids: Set<UInt32>?) throws(LedgerError) {
        var recorded: [Key: ACLEntryRecord] = [:]
        for record in records {
            if case .user(let uid) = record.qualifier { recorded[Key(path: record.nodePath, uid: uid)] = record }
        }
        var handled = Set<Key>()
        for permissionReport in reports {
            var subjects = decisions.subjects(permission: permissionReport.permission)
            if let uids { subjects.formIntersection(uids) }
            for device in permissionReport.devices where device.route == .nodes {
                for uid in subjects.sorted() {
                    guard let grant = decisions.decision(uid: uid, permission: permissionReport.permission,
                                                         deviceID: device.id),
                          grant.decision == .allow else { continue }
                    for node in device.nodes {
                        let key = Key(path: node.path, uid: uid)
                        // A node shared by two devices (an ALSA control node) is handled once.
                        guard handled.insert(key).inserted else { continue }
                        try ensure(node, of: device, permission: permissionReport.permission, grant: grant,
                                   record: recorded[key])
                    }
                }
            }
        }
        for record in records {
            guard case .user(let uid) = record.qualifier, !handled.contains(Key(path: record.nodePath, uid: uid))
            else { continue }
            try retire(record, uid: uid)
        }
    }

    // MARK: - Adding

    private mutating func ensure(_ node: DeviceNode, of device: Device, permission: Permission, grant: Grant,
                                 record: ACLEntryRecord?) throws(LedgerError) {
        let uid = grant.subject.uid
        let name = grant.subject.name
        guard case .present(let facts) = node.state else {
            if case .unusable(let why) = node.state { try refuseUnusable(node, why: why, device: device, grant: grant) }
            return
        }
        let entry = NodeACL.userEntry(facts, uid: uid)
        let sufficient = entry.map { $0.effective.isSuperset(of: node.required) } ?? false
        // Not devaccess's entry: drift reports it; devaccess does not take it over or widen it.
        if record == nil && entry != nil { return }
        if let record, sufficient {
            // The entry is right; the record is brought up to date with the grant and node it serves.
            if record.major != facts.major || record.minor != facts.minor || record.deviceID != device.id
                || record.grantID != grant.id {
                try ledger.recordACLEntryAdded(newEntry(node, facts, device, grant), by: enforcer.actor,
                                               subject: grant.subject, permission: permission,
                                               deviceName: device.name, at: enforcer.clock())
            }
            return
        }
        try ledger.recordACLEntryAdded(newEntry(node, facts, device, grant), by: enforcer.actor, subject: grant.subject,
                                       permission: permission, deviceName: device.name, at: enforcer.clock())
        CrashPoint.afterLedgerWrite.hit(enforcer.testCrashAt)
        let added = Result { () throws(ACLWriter.WriteError) -> AddResult in
            if entry != nil {
                // devaccess's own entry (recorded), not in effect: widen it; the mask grows
                // without widening anyone else.
                return try ACLWriter.addUserEntry(path: node.path, expectedMajor: facts.major,
                                                  expectedMinor: facts.minor, uid: uid, permissions: node.required)
                    ? .added : .alreadyInEffect
            }
            // No entry at the probe: create-only, so one that appeared since is found, not taken over.
            switch try ACLWriter.createUserEntry(path: node.path, expectedMajor: facts.major, expectedMinor: facts.minor,
                                                 uid: uid, permissions: node.required) {
            case .created: return .added
            case .alreadyPresent(let permissions, let effective): return .foreign(permissions, effective: effective)
            }
        }
        switch added {
        case .failure(let error):
            try undoIntent(node.path, uid: uid, grant: grant, permission: permission, device: device, error: error)
            return
        case .success(.alreadyInEffect):
            return
        case .success(.foreign(let permissions, let effective)):
            try disown(node, permissions: permissions, effective: effective, grant: grant, permission: permission,
                       device: device)
            return
        case .success(.added):
            break
        }
        CrashPoint.afterACLEdit.hit(enforcer.testCrashAt)
        let entryText = ACLEntry(tag: .user(uid), permissions: node.required, qualifierName: name).text
        report.changes.append(EnforcementChange(
            action: .aclAdded, nodePath: node.path, uid: uid, userName: name, permission: permission,
            deviceID: device.id, grantID: grant.id,
            message: "added \(entryText) on \(node.path) (\(permission.rawValue) \(device.name), grant \(grant.id))"
                + (record == nil ? "" : entry == nil
                    ? "; it was missing (node re-created or an earlier run was interrupted)"
                    : "; it was there but not in effect (its permissions or the ACL mask had been narrowed)")))
    }

    private enum AddResult {
        case added
        /// devaccess's entry was already in effect when the edit came: nothing changed.
        case alreadyInEffect
        /// An entry for the user that was not there at the probe: not devaccess's.
        case foreign(AccessMode, effective: AccessMode)
    }

    /// An entry for the user appeared between the probe and the edit (logind, an admin): it is
    /// not devaccess's. The intent record is dropped so nothing of devaccess's claims it (a later
    /// revoke or expiry leaves it), and it is reported as drift, not as an added entry.
    private mutating func disown(_ node: DeviceNode, permissions: AccessMode, effective: AccessMode, grant: Grant,
                                 permission: Permission, device: Device) throws(LedgerError) {
        let uid = grant.subject.uid, name = grant.subject.name
        try ledger.recordACLEntryRemoved(nodePath: node.path, qualifier: .user(uid), by: enforcer.actor,
                                         subject: grant.subject, permission: permission, deviceName: device.name,
                                         at: enforcer.clock())
        let entryText = ACLEntry(tag: .user(uid), permissions: permissions, qualifierName: name).text
        report.drift.append(DriftItem(
            kind: .unrecordedEntry, permission: permission, deviceID: device.id, nodePath: node.path, uid: uid,
            userName: name, grantID: grant.id,
            message: "\(node.path) has \(entryText), which devaccess did not make (it appeared while devaccess was "
                + "adding its own, and was left as it is); "
                + (effective.isSuperset(of: node.required)
                   ? "it serves grant \(grant.id), but revoking will not remove it"
                   : "devaccess does not change it, so grant \(grant.id) is not in effect there")
                + " (remove it with 'setfacl -x u:\(name) \(node.path)' and run 'devaccess reconcile')"))
    }

    private func newEntry(_ node: DeviceNode, _ facts: NodeFacts, _ device: Device, _ grant: Grant) -> NewACLEntry {
        NewACLEntry(nodePath: node.path, deviceID: device.id, major: facts.major, minor: facts.minor,
                    qualifier: .user(grant.subject.uid), permissions: node.required, grantID: grant.id)
    }

    /// The edit did not happen: drop the record written as intent, and say why.
    private mutating func undoIntent(_ path: String, uid: UInt32, grant: Grant, permission: Permission, device: Device,
                                     error: ACLWriter.WriteError) throws(LedgerError) {
        try ledger.recordACLEntryRemoved(nodePath: path, qualifier: .user(uid), by: enforcer.actor,
                                         subject: grant.subject, permission: permission, deviceName: device.name,
                                         at: enforcer.clock())
        switch error {
        case .vanished:
            report.notes.append("\(path) went away before its ACL entry could be added; it is added when the node returns")
        case .notCharacterDevice, .wrongDevice:
            try problem(.refused, path: path, uid: uid, name: grant.subject.name, permission: permission,
                        deviceID: device.id, "not applied for grant \(grant.id): \(error.description)")
        case .failed:
            try problem(.failed, path: path, uid: uid, name: grant.subject.name, permission: permission,
                        deviceID: device.id, "not applied for grant \(grant.id): \(error.description)")
        }
    }

    private mutating func refuseUnusable(_ node: DeviceNode, why: String, device: Device, grant: Grant) throws(LedgerError) {
        var info = stat()
        if lstat(node.path, &info) != 0 && errno == ENOENT {
            report.notes.append("\(node.path) of \(device.id) is gone; its entry for \(grant.subject.name) is added when it returns")
            return
        }
        try problem(.refused, path: node.path, uid: grant.subject.uid, name: grant.subject.name,
                    permission: device.permission, deviceID: device.id,
                    "not applied for grant \(grant.id): \(why)")
    }

    // MARK: - Removing

    /// A record no standing grant explains on a present node: remove the entry, then the record.
    private mutating func retire(_ record: ACLEntryRecord, uid: UInt32) throws(LedgerError) {
        let name = enforcer.identities(uid)?.name ?? String(uid)
        let subject = Principal(uid: uid, name: name)
        let permission = try permissionOf(record)
        let present = reports.flatMap(\.devices)
        if let permission,
           decisions.decision(uid: uid, permission: permission, deviceID: record.deviceID)?.decision == .allow,
           !present.contains(where: { $0.id == record.deviceID }),
           !present.contains(where: { $0.nodes.contains { $0.path == record.nodePath } }) {
            report.notes.append("kept the record of \(name)'s entry on \(record.nodePath): its grant stands and "
                + "\(record.deviceID) is not present now")
            return
        }
        let entryText = ACLEntry(tag: .user(uid), permissions: record.permissions, qualifierName: name).text
        func change(_ action: EnforcementChange.Action, _ message: String) {
            report.changes.append(EnforcementChange(action: action, nodePath: record.nodePath, uid: uid, userName: name,
                                                    permission: permission, deviceID: record.deviceID,
                                                    grantID: record.grantID, message: message))
        }
        CrashPoint.afterLedgerWrite.hit(enforcer.testCrashAt)
        let outcome = Result { () throws(ACLWriter.WriteError) -> Bool in
            try ACLWriter.removeUserEntry(path: record.nodePath, expectedMajor: record.major,
                                          expectedMinor: record.minor, uid: uid)
        }
        switch outcome {
        case .success(let removed):
            CrashPoint.afterACLEdit.hit(enforcer.testCrashAt)
            try forget(record, subject: subject, permission: permission)
            change(removed ? .aclRemoved : .recordDropped, removed
                   ? "removed \(entryText) from \(record.nodePath) (" + endedWhy(record) + ")"
                   : "dropped the record of \(entryText) on \(record.nodePath): the entry was already gone")
        case .failure(.vanished):
            try forget(record, subject: subject, permission: permission)
            change(.recordDropped, "dropped the record of \(entryText) on \(record.nodePath): the node is gone, "
                   + "and the entry with it")
        case .failure(let error) where error.isWrongDevice:
            try forget(record, subject: subject, permission: permission)
            change(.recordDropped, "dropped the record of \(entryText) on \(record.nodePath): \(error.description); "
                   + "the entry went with the old node")
        case .failure(let error) where error.isNotCharacterDevice:
            // Whatever stands there now is not the node devaccess edited: never touch it.
            try forget(record, subject: subject, permission: permission)
            try problem(.refused, path: record.nodePath, uid: uid, name: name, permission: permission,
                        deviceID: record.deviceID, "left untouched: \(error.description)")
        case .failure(let error):
            // The entry may still be there: keep the record so the next run tries again.
            try problem(.failed, path: record.nodePath, uid: uid, name: name, permission: permission,
                        deviceID: record.deviceID, "could not remove \(entryText): \(error.description)")
        }
    }

    /// Why no grant stands behind a record: the policy that ended its grant in this run, if so.
    private func endedWhy(_ record: ACLEntryRecord) -> String {
        guard let id = record.grantID, let ended = report.endedByPolicy.first(where: { $0.grant.id == id }) else {
            return "no grant stands for it"
        }
        return "grant \(id) was ended: \(ended.reason)"
    }

    /// Drops exactly the record this run read: if another writer (the broker, a root CLI)
    /// replaced it meanwhile, the replacement is theirs and stays.
    private func forget(_ record: ACLEntryRecord, subject: Principal, permission: Permission?) throws(LedgerError) {
        try ledger.recordACLEntryRemoved(record, by: enforcer.actor, subject: subject, permission: permission,
                                         at: enforcer.clock())
    }

    /// The permission a record serves: from its grant (standing or ended), else from the
    /// device it names, when that device is present.
    private func permissionOf(_ record: ACLEntryRecord) throws(LedgerError) -> Permission? {
        if let id = record.grantID {
            if let grant = decisions.grants.first(where: { $0.id == id }) { return grant.permission }
            if case .user(let uid) = record.qualifier,
               let grant = try ledger.grants(uid: uid, includeInactive: true).first(where: { $0.id == id }) {
                return grant.permission
            }
        }
        return reports.first { $0.devices.contains { $0.id == record.deviceID } }?.permission
    }

    // MARK: - Problems

    private mutating func problem(_ kind: EnforcementProblem.Kind, path: String, uid: UInt32, name: String,
                                  permission: Permission?, deviceID: String?, _ message: String) throws(LedgerError) {
        report.problems.append(EnforcementProblem(kind: kind, nodePath: path, uid: uid, userName: name,
                                                  permission: permission, deviceID: deviceID,
                                                  message: "\(path): \(message)"))
        if kind == .refused {
            try ledger.append(AuditEvent(type: .refused, time: enforcer.clock(), actor: enforcer.actor,
                                         subject: Principal(uid: uid, name: name), permission: permission,
                                         deviceID: deviceID, nodePath: path, details: ["reason": message]))
        }
    }
}

extension ACLWriter.WriteError {
    var isWrongDevice: Bool {
        if case .wrongDevice = self { return true }
        return false
    }

    var isNotCharacterDevice: Bool {
        if case .notCharacterDevice = self { return true }
        return false
    }
}
