import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessACL

/// `devaccess run`: each live run's group id gets an ACL entry on the nodes of the devices
/// its program grants allow, and loses it when the run ends, the grant ends or the device
/// goes. Run group ids are devaccess's alone (RunGroups), so every entry for one is its own:
/// no foreign-entry or drift cases, unlike user entries. Same order as user entries, so a
/// crash converges: record then edit to add, edit then drop the record to remove.
extension Enforcer {
    /// Ends runs devaccessd no longer watches: the program's process is gone (the daemon was
    /// down when it exited) or it was never started (the daemon stopped while starting it).
    func endVanishedRuns(_ report: inout EnforcementReport) throws(LedgerError) {
        let now = clock()
        let boot = ProcessTable.bootID()
        var endings: [(runID: Int64, status: String)] = []
        for run in try ledger.runs() {
            guard let process = run.process else {
                if now.timeIntervalSince(run.started) > Self.runStartLimit {
                    endings.append((run.id, "never started: devaccessd stopped while starting it"))
                }
                continue
            }
            // A zombie is the broker's to reap: it records the exit status itself.
            if boot != process.bootID {
                endings.append((run.id, "ended with the boot it ran in"))
            } else if let entry = ProcessTable.entry(process.pid), entry.startTicks == process.startTicks {
                continue
            } else {
                endings.append((run.id, "ended while devaccessd was not watching (exit status unknown)"))
            }
        }
        if !endings.isEmpty { report.runsEnded += try ledger.endRuns(endings, by: actor, at: now) }
    }

    /// devaccessd's start: the runs an earlier devaccessd started have nobody relaying for them
    /// or watching them any more (their programs got SIGHUP when it stopped). Whatever of them
    /// still runs is ended (every process carrying the run's group id: SIGTERM, SIGKILL half a
    /// second later), and the runs with it, so no run keeps its access unwatched.
    @discardableResult
    public func endRunsOfAnEarlierDaemon() throws(LedgerError) -> [Run] {
        let live = try ledger.runs()
        guard !live.isEmpty else { return [] }
        var endings: [(runID: Int64, status: String)] = []
        for run in live {
            let ended = RunProcesses.end(group: run.gid, grace: .milliseconds(500))
            endings.append((run.id, ended.isEmpty
                ? "ended while devaccessd was not running (exit status unknown)"
                : "ended when devaccessd started again: \(ended.count) process(es) of it still ran and were stopped"))
        }
        return try ledger.endRuns(endings, by: actor, at: clock())
    }

    /// How long a run may stay "being started" before a pass takes it for abandoned.
    static let runStartLimit: TimeInterval = 120

    /// `only`: the node paths a hotplug pass is about (records elsewhere are not looked at).
    func applyRunAccess(active: [Grant], reports: [AdapterReport], only paths: Set<String>? = nil,
                        _ report: inout EnforcementReport) throws(LedgerError) {
        let runs = try ledger.runs()
        let decisions = RunDecisions(active: active)
        let records = try ledger.aclEntries().filter { record in
            guard paths?.contains(record.nodePath) ?? true else { return false }
            if case .group(let gid) = record.qualifier { return RunGroups.contains(gid) }
            return false
        }
        var recorded: [RunEntryKey: ACLEntryRecord] = [:]
        for record in records {
            if case .group(let gid) = record.qualifier { recorded[RunEntryKey(path: record.nodePath, gid: gid)] = record }
        }
        var handled = Set<RunEntryKey>()
        // Kept: a grant stands for a device that is not present now (re-added when it returns).
        var kept = Set<RunEntryKey>()
        for run in runs {
            for permissionReport in reports where run.permissions.contains(permissionReport.permission) {
                for device in permissionReport.devices where device.route == .nodes {
                    guard let grant = decisions.decision(for: run, permission: permissionReport.permission,
                                                         deviceID: device.id),
                          grant.decision == .allow, grant.program != nil else { continue }
                    for node in device.nodes {
                        let key = RunEntryKey(path: node.path, gid: run.gid)
                        guard handled.insert(key).inserted else { continue }
                        try ensureRunEntry(node, device: device, run: run, grant: grant, record: recorded[key], &report)
                    }
                }
            }
        }
        let present = Set(reports.flatMap(\.devices).flatMap(\.nodes).map(\.path))
        for run in runs {
            for record in records where record.qualifier == .group(run.gid) && !present.contains(record.nodePath) {
                let standing = run.permissions.contains { permission in
                    decisions.decision(for: run, permission: permission, deviceID: record.deviceID)?.decision == .allow
                }
                if standing { kept.insert(RunEntryKey(path: record.nodePath, gid: run.gid)) }
            }
        }
        for record in records {
            guard case .group(let gid) = record.qualifier else { continue }
            let key = RunEntryKey(path: record.nodePath, gid: gid)
            guard !handled.contains(key), !kept.contains(key) else { continue }
            try retireRunEntry(record, gid: gid, run: runs.first { $0.gid == gid }, &report)
        }
    }

    private func ensureRunEntry(_ node: DeviceNode, device: Device, run: Run, grant: Grant, record: ACLEntryRecord?,
                                _ report: inout EnforcementReport) throws(LedgerError) {
        guard case .present(let facts) = node.state else { return }
        let mask = facts.acl?.first { $0.tag == .mask }?.permissions
        let entry = facts.acl?.first { $0.tag == .group(run.gid) }
        let effective = entry.map { mask.map($0.permissions.intersection) ?? $0.permissions }
        let newEntry = NewACLEntry(nodePath: node.path, deviceID: device.id, major: facts.major, minor: facts.minor,
                                   qualifier: .group(run.gid), permissions: node.required, grantID: grant.id)
        if let record, effective?.isSuperset(of: node.required) == true {
            if record.major != facts.major || record.minor != facts.minor || record.grantID != grant.id {
                try ledger.recordACLEntryAdded(newEntry, by: actor, subject: run.subject, permission: device.permission,
                                               deviceName: device.name, at: clock())
            }
            return
        }
        try ledger.recordACLEntryAdded(newEntry, by: actor, subject: run.subject, permission: device.permission,
                                       deviceName: device.name, at: clock())
        CrashPoint.afterLedgerWrite.hit(testCrashAt)
        do {
            try ACLWriter.addEntry(.group(run.gid), path: node.path, expectedMajor: facts.major,
                                   expectedMinor: facts.minor, permissions: node.required)
        } catch {
            try ledger.recordACLEntryRemoved(nodePath: node.path, qualifier: .group(run.gid), by: actor,
                                             subject: run.subject, permission: device.permission,
                                             deviceName: device.name, at: clock())
            if case .vanished = error { return }
            report.problems.append(EnforcementProblem(
                kind: .failed, nodePath: node.path, uid: run.subject.uid, userName: run.subject.name,
                permission: device.permission, deviceID: device.id,
                message: "\(node.path): not applied for run \(run.id): \(error.description)"))
            return
        }
        CrashPoint.afterACLEdit.hit(testCrashAt)
        let text = ACLEntry(tag: .group(run.gid), permissions: node.required).text
        report.changes.append(EnforcementChange(
            action: .aclAdded, nodePath: node.path, uid: run.subject.uid, userName: run.subject.name,
            permission: device.permission, deviceID: device.id, grantID: grant.id,
            message: "added \(text) on \(node.path) (\(device.permission.rawValue) \(device.name), run \(run.id) of "
                + "\(run.program.path) by \(run.subject.name), grant \(grant.id))"))
    }

    private func retireRunEntry(_ record: ACLEntryRecord, gid: UInt32, run: Run?,
                                _ report: inout EnforcementReport) throws(LedgerError) {
        let subject = run?.subject ?? actor
        let text = ACLEntry(tag: .group(gid), permissions: record.permissions).text
        let why = run == nil ? "its run ended" : "no grant of its run covers it now"
        func change(_ action: EnforcementChange.Action, _ message: String) {
            report.changes.append(EnforcementChange(action: action, nodePath: record.nodePath, uid: subject.uid,
                                                    userName: subject.name, permission: nil, deviceID: record.deviceID,
                                                    grantID: record.grantID, message: message))
        }
        let outcome = Result { () throws(ACLWriter.WriteError) -> Bool in
            try ACLWriter.removeEntry(.group(gid), path: record.nodePath, expectedMajor: record.major,
                                      expectedMinor: record.minor)
        }
        switch outcome {
        case .success(let removed):
            CrashPoint.afterACLEdit.hit(testCrashAt)
            try ledger.recordACLEntryRemoved(record, by: actor, subject: subject, at: clock())
            change(removed ? .aclRemoved : .recordDropped, removed
                   ? "removed \(text) from \(record.nodePath) (\(why))"
                   : "dropped the record of \(text) on \(record.nodePath): the entry was already gone")
        case .failure(let error) where error.isWrongDevice || error.isNotCharacterDevice:
            try ledger.recordACLEntryRemoved(record, by: actor, subject: subject, at: clock())
            change(.recordDropped, "dropped the record of \(text) on \(record.nodePath): \(error.description)")
        case .failure(.vanished):
            try ledger.recordACLEntryRemoved(record, by: actor, subject: subject, at: clock())
            change(.recordDropped, "dropped the record of \(text) on \(record.nodePath): the node is gone")
        case .failure(let error):
            report.problems.append(EnforcementProblem(
                kind: .failed, nodePath: record.nodePath, uid: subject.uid, userName: subject.name, permission: nil,
                deviceID: record.deviceID, message: "\(record.nodePath): could not remove \(text): \(error.description)"))
        }
    }

    /// Removes every run's entries without writing the ledger: for ending run access when
    /// the ledger cannot record it (as `removeEntriesFailingClosed` does for grants).
    public func removeRunEntriesFailingClosed(gids: Set<UInt32>) {
        guard let records = try? ledger.aclEntries() else { return }
        for record in records {
            guard case .group(let gid) = record.qualifier, gids.contains(gid) else { continue }
            _ = try? ACLWriter.removeEntry(.group(gid), path: record.nodePath, expectedMajor: record.major,
                                           expectedMinor: record.minor)
        }
    }
}

struct RunEntryKey: Hashable {
    var path: String
    var gid: UInt32
}
