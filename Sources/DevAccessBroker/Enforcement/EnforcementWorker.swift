import FoundationEssentials
import Dispatch
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessHardware
import DevAccessLedger
import DevAccessEnforcement
import CSystemd

/// The loop of `LiveEnforcer`'s thread: one `poll(2)` over the wake eventfd and inotify,
/// its timeout the next periodic or retry run; the expiry timer wakes it through the
/// mailbox. Everything it does runs here, one thing at a time.
final class EnforcementWorker {
    private let owner: LiveEnforcer
    private var enforcer: Enforcer { owner.enforcer }
    private var log: BrokerLog { owner.log }
    /// The instant the next grant runs out (wall clock).
    private let expiryTimer: ExpiryTimer
    private let watch: DirectoryWatch?
    private var runLog: EnforcementLog
    /// Per permission, for `hotplug` audit events (nil: no udev monitor).
    private var trackers: [Permission: HotplugTracker]?
    private var periodicDue: ContinuousClock.Instant?
    private var retryDue: ContinuousClock.Instant?
    private var retryDelay = EnforcementWorker.firstRetry
    /// A pidfd per process a standing `once` grant lasts for: it polls readable when the
    /// process exits, and the run that follows ends the grant (`ProcessLiveness`).
    private var holders: [ProcessHolder: CInt] = [:]

    static let firstRetry = Duration.seconds(1)
    static let lastRetry = Duration.seconds(60)
    /// Triggers whose run must happen even when the ledger looks idle: they end grants.
    static let mandatory: Set<String> = ["startup", "expiry", "retry", "process-exit"]

    init(owner: LiveEnforcer, tracksHotplug: Bool) {
        self.owner = owner
        expiryTimer = ExpiryTimer { [owner] in owner.requestReconcile(trigger: "expiry") }
        runLog = EnforcementLog(log: owner.log)
        trackers = tracksHotplug ? [:] : nil
        var wanted: [(directory: String, names: Set<String>, purpose: DirectoryWatch.Purpose)] = []
        if let directory = owner.options.ledgerDirectory {
            wanted.append((directory, [Ledger.fileName, Ledger.fileName + "-wal"], .ledger))
        }
        for (directory, names) in owner.options.nodeDirectories.sorted(by: { $0.key < $1.key }) {
            wanted.append((directory, names, .nodes))
        }
        if let directory = owner.options.policyDirectory {
            wanted.append((directory, [PolicyFiles.mainFile, PolicyFiles.dropInDirectory], .policy))
            var info = stat()
            if stat(directory + "/" + PolicyFiles.dropInDirectory, &info) == 0 {
                wanted.append((directory + "/" + PolicyFiles.dropInDirectory, [DirectoryWatch.anyName], .policy))
            }
        }
        guard !wanted.isEmpty else {
            watch = nil
            return
        }
        let watch: DirectoryWatch
        do {
            watch = try DirectoryWatch()
        } catch {
            owner.log.warning("cannot watch files (inotify): expiries of grants made outside the broker wait "
                              + "for the next run", ["error": error.description])
            self.watch = nil
            return
        }
        for (directory, names, purpose) in wanted {
            do {
                try watch.watch(directory, names: names, for: purpose)
            } catch {
                owner.log.warning("cannot watch a directory (inotify)", ["directory": directory, "error": error.description])
            }
        }
        self.watch = watch
    }

    func run(startedUp: DispatchSemaphore) {
        do {
            let ended = try enforcer.endRunsOfAnEarlierDaemon()
            if !ended.isEmpty {
                log.info("ended runs an earlier devaccessd started", ["runs": ended.map { String($0.id) }.joined(separator: ",")])
            }
        } catch {
            log.error("could not end the runs an earlier devaccessd started", ["error": error.description])
        }
        reconcile(["startup"], hotplug: [], eventStarted: nil)
        if trackers != nil {
            var initial: [Permission: HotplugTracker] = [:]
            for permission in Set(LiveEnforcer.subsystemPermissions.values) {
                initial[permission] = HotplugTracker(initial: enforcer.devices.report(for: permission).devices)
            }
            trackers = initial
        }
        rearmExpiry()
        watchHolders()
        startedUp.signal()
        loop()
        expiryTimer.arm(nil)
        for pidfd in holders.values { Socket.close(pidfd) }
        holders.removeAll()
    }

    private func loop() {
        var fixed = [pollfd(fd: owner.wakeDescriptor, events: Int16(POLLIN), revents: 0)]
        if let watch { fixed.append(pollfd(fd: watch.descriptor, events: Int16(POLLIN), revents: 0)) }
        while true {
            let watched = Array(holders)
            var descriptors = fixed + watched.map { pollfd(fd: $0.value, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), pollTimeout())
            if ready < 0 {
                if errno == EINTR { continue }
                log.error("live enforcement stops: poll failed", ["error": Errno.current.description])
                return
            }
            var triggers: [String] = []
            var rearm = false
            var eventStarted: UInt64?
            // Declared test nodes' directory events, as node events (DEBUG builds only declare nodes).
            var declaredNodes: [HotplugEvent] = []
            for (index, (holder, pidfd)) in watched.enumerated() where descriptors[fixed.count + index].revents != 0 {
                // The process exited: its grants end in the run below.
                Socket.close(pidfd)
                holders[holder] = nil
                log.debug("a process a once grant lasts for exited", ["pid": String(holder.pid)])
                if !triggers.contains("process-exit") { triggers.append("process-exit") }
                eventStarted = eventStarted ?? MonotonicClock.microseconds()
            }
            if descriptors[0].revents != 0 {
                var counter: UInt64 = 0
                _ = Glibc.read(owner.wakeDescriptor, &counter, MemoryLayout<UInt64>.size)
            }
            let now = ContinuousClock.now
            if let due = retryDue, now >= due {
                retryDue = nil
                triggers.append("retry")
            }
            if let due = periodicDue, now >= due {
                schedulePeriodic()
                triggers.append("periodic")
            }
            if let watch, fixed.count > 1, descriptors[1].revents != 0 {
                for event in watch.drain() {
                    if event.mask & UInt32(IN_IGNORED) != 0 {
                        log.warning("a watched directory went away; its changes are no longer noticed",
                                    ["directory": event.path])
                    }
                    switch event.purpose {
                    case .ledger:
                        rearm = true
                    case .nodes:
                        eventStarted = eventStarted ?? MonotonicClock.microseconds()
                        guard !event.path.isEmpty, event.mask & UInt32(IN_IGNORED) == 0 else {
                            // An overflow or the directory gone: anything may have changed.
                            if !triggers.contains("nodes") { triggers.append("nodes") }
                            continue
                        }
                        let gone = event.mask & (UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM)) != 0
                        declaredNodes.append(HotplugEvent(action: gone ? "remove" : "add", subsystem: "",
                                                          devnode: event.path, seqnum: 0, kernelArrival: nil,
                                                          received: MonotonicClock.microseconds()))
                    case .policy:
                        guard policyMatters(event, watch: watch) else { continue }
                        if !triggers.contains("policy") { triggers.append("policy") }
                        eventStarted = eventStarted ?? MonotonicClock.microseconds()
                    }
                }
            }
            let mail = owner.takeMailbox()
            if mail.stopping {
                for job in mail.jobs { job.abandon() }
                return
            }
            for job in mail.jobs {
                perform(job)
                rearm = true
            }
            for trigger in mail.triggers where !triggers.contains(trigger) { triggers.append(trigger) }
            if mail.triggers.contains("expiry") { expiryTimer.fired() }
            let udevEvents = mail.hotplug.events
            let arrivals = (udevEvents + declaredNodes).map { $0.kernelArrival ?? $0.received }
            eventStarted = ([eventStarted].compactMap { $0 } + arrivals).min()
            // Node events alone get a pass over their devices; with anything that asks for a
            // full reconcile (or more events than the queue keeps) they ride along with it.
            let nodeLabels = (udevEvents.isEmpty && !mail.hotplug.overflowed ? [] : ["hotplug"])
                + (declaredNodes.isEmpty ? [] : ["nodes"])
            if triggers.contains("policy") && !mail.triggers.contains("policy") {
                // From inotify (a SIGHUP has reloaded it already): read it now, say so, then apply it.
                owner.options.reloadPolicy?("inotify")
            }
            if !triggers.isEmpty || mail.hotplug.overflowed {
                triggers += nodeLabels.filter { !triggers.contains($0) }
                let changed = reconcile(triggers, hotplug: udevEvents, eventStarted: eventStarted)
                if mail.hotplug.overflowed { resyncAfterOverflow(dropped: mail.hotplug.dropped) }
                rearm = true
                if !nodeLabels.isEmpty || triggers.contains("nodes") {
                    owner.nodesApplied(NodesApplied(paths: [], permissions: Set(LiveEnforcer.subsystemPermissions.values),
                                                    changed: changed, full: true))
                }
            } else if !nodeLabels.isEmpty {
                triggers = nodeLabels
                applyNodes(udevEvents + declaredNodes, label: nodeLabels.joined(separator: ","), eventStarted: eventStarted)
                if !udevEvents.isEmpty { audit(udevEvents) }
                rearm = true
            }
            owner.ran(mail.jobs.map(\.name) + triggers)
            if rearm {
                rearmExpiry()
                watchHolders()
            }
        }
    }

    /// Opens a pidfd for each process a standing `once` grant lasts for and closes those no
    /// grant needs any more. A process that is already gone (or whose pid now names another
    /// process) asks for a run, which ends its grants.
    private func watchHolders() {
        let wanted: Set<ProcessHolder>
        do {
            wanted = Set(try enforcer.ledger.grants(now: enforcer.clock()).compactMap(\.holder))
        } catch {
            log.warning("cannot read the once grants to watch their processes", ["error": error.description])
            return
        }
        for (holder, pidfd) in holders where !wanted.contains(holder) {
            Socket.close(pidfd)
            holders[holder] = nil
        }
        var gone = false
        for holder in wanted where holders[holder] == nil {
            let pidfd = devaccess_pidfd_open(holder.pid, 0)
            // Checked after the pidfd is open: if /proc then still shows the recorded start
            // time and no exit, the pidfd is that process's (it ran before the open and has
            // not exited since), and it polls readable when the process exits.
            guard pidfd >= 0 else {
                gone = true
                continue
            }
            if ProcessLiveness.gone(holder) != nil {
                Socket.close(pidfd)
                gone = true
                continue
            }
            holders[holder] = pidfd
        }
        if gone { owner.requestReconcile(trigger: "process-exit") }
    }

    /// Whether a policy directory event can change the policy: `devaccess.conf`, a
    /// `conf.d/*.conf` file, `conf.d` itself (then its files are watched from now on), or an
    /// overflow. Editors' swap and backup files are not.
    private func policyMatters(_ event: DirectoryWatch.Event, watch: DirectoryWatch) -> Bool {
        guard let directory = owner.options.policyDirectory else { return false }
        let dropIns = directory + "/" + PolicyFiles.dropInDirectory
        if event.path == dropIns {
            if event.mask & UInt32(IN_IGNORED) == 0, event.mask & UInt32(IN_DELETE) == 0,
               event.mask & UInt32(IN_MOVED_FROM) == 0 {
                do {
                    try watch.watch(dropIns, names: [DirectoryWatch.anyName], for: .policy)
                } catch {
                    log.warning("cannot watch a directory (inotify)", ["directory": dropIns, "error": error.description])
                }
            }
            return true
        }
        return event.path.isEmpty || event.path == directory + "/" + PolicyFiles.mainFile
            || (event.path.hasPrefix(dropIns + "/") && event.path.hasSuffix(".conf"))
            || event.path == directory
    }

    // MARK: - Runs

    private func perform(_ job: LiveEnforcer.Job) {
        let started = MonotonicClock.microseconds()
        switch job.run(enforcer) {
        case .success(let report):
            runLog.record(report, .init(trigger: job.name, microseconds: MonotonicClock.microseconds() - started,
                                        eventToDone: nil, routine: false))
        case .failure(let error):
            log.warning("enforcement operation failed", ["operation": job.name, "error": error.description])
            // An ending the ledger refused is off the nodes but not yet recorded: retry soon.
            if !enforcer.unrecorded.isEmpty && retryDue == nil {
                retryDue = ContinuousClock.now + retryDelay
                retryDelay = min(retryDelay * 2, Self.lastRetry)
            }
        }
    }

    /// A pass over the devices of the nodes `events` name (not a full reconcile: other
    /// nodes wait for the periodic run or the next full one), then the hook is told.
    private func applyNodes(_ events: [HotplugEvent], label: String, eventStarted: UInt64?) {
        let paths = Set(events.map(\.devnode))
        // A declared node's event has no subsystem: any node-gated permission may own it.
        let permissions = events.contains { $0.subsystem.isEmpty } ? nil
            : Set(events.compactMap { LiveEnforcer.subsystemPermissions[$0.subsystem] })
        let started = MonotonicClock.microseconds()
        var changed = Set<String>()
        do {
            if try !enforcer.hasWork() {
                log.debug("enforcement run skipped: the ledger holds nothing to enforce", ["trigger": label])
            } else {
                let report = try enforcer.applyNodes(NodeSelection(paths: paths, permissions: permissions))
                let done = MonotonicClock.microseconds()
                runLog.record(report, .init(trigger: label, microseconds: done - started,
                                            eventToDone: eventStarted.map { done >= $0 ? done - $0 : 0 },
                                            routine: false, nodes: paths.sorted().joined(separator: ",")))
                changed = Set(report.changes.map(\.nodePath))
            }
            // A retry already due stays: it is a full reconcile, which this pass is not.
        } catch {
            // The retry is a full reconcile: it covers these nodes too.
            runLog.failed(error, trigger: label, retryIn: retryDelay)
            // An earlier retry stays as due as it was: failing node passes cannot put it off.
            let due = ContinuousClock.now + retryDelay
            retryDue = min(retryDue ?? due, due)
            retryDelay = min(retryDelay * 2, Self.lastRetry)
        }
        owner.nodesApplied(NodesApplied(paths: paths.sorted(),
                                        permissions: permissions ?? Set(LiveEnforcer.subsystemPermissions.values),
                                        changed: changed, full: false))
    }

    /// One full reconcile for everything that asked since the last one; the nodes whose ACL
    /// it changed.
    @discardableResult
    private func reconcile(_ triggers: [String], hotplug: [HotplugEvent], eventStarted: UInt64?) -> Set<String> {
        let label = triggers.joined(separator: ",")
        let mandatory = triggers.contains { Self.mandatory.contains($0) }
        let started = MonotonicClock.microseconds()
        var changed = Set<String>()
        do {
            // Skipping is only for runs that could not end anything: a hotplug event on a
            // machine nobody was granted anything on costs no device probe.
            if !mandatory, try !enforcer.hasWork() {
                log.debug("enforcement run skipped: the ledger holds nothing to enforce", ["trigger": label])
            } else {
                let report = try enforcer.reconcile()
                changed = Set(report.changes.map(\.nodePath))
                let done = MonotonicClock.microseconds()
                // Only the periodic run is routine (debug when idle); every event-driven run is logged.
                runLog.record(report, .init(trigger: label, microseconds: done - started,
                                            eventToDone: eventStarted.map { done >= $0 ? done - $0 : 0 },
                                            routine: triggers == ["periodic"]))
            }
            retryDue = nil
            retryDelay = Self.firstRetry
            schedulePeriodic()
        } catch {
            // A busy or broken ledger: try again, less often each time.
            runLog.failed(error, trigger: label, retryIn: retryDelay)
            retryDue = ContinuousClock.now + retryDelay
            retryDelay = min(retryDelay * 2, Self.lastRetry)
        }
        if !hotplug.isEmpty { audit(hotplug) }
        return changed
    }

    /// `hotplug` audit events for devices that came or went (design: remove -> audit event).
    /// After the run, so recording them never delays an ACL entry.
    private func audit(_ events: [HotplugEvent]) {
        guard var trackers else { return }
        var probed: [Permission: [Device]] = [:]
        var records: [AuditEvent] = []
        // The events' devices only: another device's change is told at its own node's event.
        let paths = Set(events.map(\.devnode))
        for event in events {
            guard let permission = LiveEnforcer.subsystemPermissions[event.subsystem],
                  var tracker = trackers[permission] else { continue }
            let devices = probed[permission] ?? enforcer.devices.report(for: permission, nodes: paths).devices
            probed[permission] = devices
            for change in tracker.apply(action: event.action, devnode: event.devnode, probed: devices)
            where change.kind != .change {
                log.info(change.kind == .add ? "device added" : "device removed", [
                    "permission": permission.rawValue, "device": change.device.id, "name": change.device.name,
                    "node": event.devnode, "seqnum": String(event.seqnum),
                ])
                records.append(AuditEvent(type: .hotplug, actor: enforcer.actor, permission: permission,
                                          deviceID: change.device.id, deviceName: change.device.name,
                                          nodePath: event.devnode,
                                          details: ["action": change.kind.rawValue, "seqnum": String(event.seqnum),
                                                    "subsystem": event.subsystem]))
            }
            trackers[permission] = tracker
        }
        self.trackers = trackers
        record(records)
    }

    /// The node events were more than the queue keeps, so the devices that came or went in
    /// them are unknown: a full probe resyncs the trackers, and each difference is recorded
    /// as a `hotplug` event marked as found by the resync (no seqnum: its event was dropped).
    private func resyncAfterOverflow(dropped: Int) {
        log.warning("more node events than the queue keeps; a full reconcile and device probe covered them",
                    ["dropped": String(dropped), "limit": String(LiveEnforcer.maxPendingNodeEvents)])
        guard var trackers else { return }
        var records: [AuditEvent] = []
        for permission in Set(LiveEnforcer.subsystemPermissions.values).sorted(by: { $0.rawValue < $1.rawValue }) {
            var tracker = trackers[permission] ?? HotplugTracker(initial: [])
            for change in tracker.resync(probed: enforcer.devices.report(for: permission).devices)
            where change.kind != .change {
                log.info(change.kind == .add ? "device added" : "device removed", [
                    "permission": permission.rawValue, "device": change.device.id, "name": change.device.name,
                    "found": "resync",
                ])
                records.append(AuditEvent(type: .hotplug, actor: enforcer.actor, permission: permission,
                                          deviceID: change.device.id, deviceName: change.device.name,
                                          nodePath: HotplugTracker.captureNode(change.device),
                                          details: ["action": change.kind.rawValue, "found": "resync",
                                                    "dropped": String(dropped)]))
            }
            trackers[permission] = tracker
        }
        self.trackers = trackers
        record(records)
    }

    /// Hotplug audit events go in after the run, so recording them never delays an ACL entry.
    private func record(_ records: [AuditEvent]) {
        guard !records.isEmpty else { return }
        do {
            _ = try enforcer.ledger.append(contentsOf: records)
        } catch {
            log.error("cannot record hotplug events in the ledger", ["error": error.description])
        }
    }

    // MARK: - Timers

    /// Arms the expiry timer for the next grant to run out (or disarms it).
    private func rearmExpiry() {
        let next: Date?
        do {
            next = try enforcer.nextExpiry()
        } catch {
            if retryDue == nil {
                runLog.failed(error, trigger: "expiry timer", retryIn: retryDelay)
                retryDue = ContinuousClock.now + retryDelay
                retryDelay = min(retryDelay * 2, Self.lastRetry)
            }
            return
        }
        // An overdue grant while a failed run waits for its retry: the retry ends it (its
        // entries are already off: the failed run removed them, failing closed), and arming
        // for a past instant would only spin failing runs.
        if let next, retryDue != nil, next <= Date() {
            if expiryTimer.armedFor != nil { expiryTimer.arm(nil) }
            return
        }
        guard next != expiryTimer.armedFor else { return }
        expiryTimer.arm(next)
        if let next {
            log.debug("expiry timer armed", ["at": ISOTime.format(next),
                                             "in_ms": String(Int(next.timeIntervalSinceNow * 1000))])
        }
    }

    private func schedulePeriodic() {
        periodicDue = owner.options.reconcileInterval.map { ContinuousClock.now + $0 }
    }

    /// Milliseconds until the earlier of the periodic run and a retry; -1: none due.
    private func pollTimeout() -> CInt {
        if periodicDue == nil && retryDue == nil && owner.options.reconcileInterval != nil { schedulePeriodic() }
        guard let due = [periodicDue, retryDue].compactMap({ $0 }).min() else { return -1 }
        let left = due - ContinuousClock.now
        guard left > .zero else { return 0 }
        // Rounded up: waking a millisecond early would only loop once more.
        let milliseconds = left.components.seconds * 1000 + (left.components.attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return CInt(clamping: milliseconds)
    }
}
