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

    /// Wait, gather what woke the worker, act on it: until stopped or poll(2) fails.
    private func loop() {
        while true {
            let ready: Ready
            do {
                ready = try wait()
            } catch {
                log.error("live enforcement stops: poll failed", ["error": error.errno.description])
                return
            }
            let wakeup = gather(ready)
            let mail = owner.takeMailbox()
            if mail.stopping {
                for job in mail.jobs { job.abandon() }
                return
            }
            act(on: wakeup, mail: mail)
        }
    }

    /// Which of the worker's descriptors poll(2) found ready.
    private struct Ready {
        var wake: Bool
        var files: Bool
        var exited: [(holder: ProcessHolder, pidfd: CInt)]
    }

    /// What woke the worker, before the mailbox is read: the triggers of a full run (in the
    /// order they came), whether the expiry timer and the holders need a new look, when the
    /// earliest event happened, and declared nodes' directory events as node events.
    private struct Wakeup {
        var triggers: [String] = []
        var rearm = false
        var eventStarted: UInt64?
        var declaredNodes: [HotplugEvent] = []

        /// Both, each trigger once, the earlier wakeup's start kept.
        func merged(with other: Wakeup) -> Wakeup {
            Wakeup(triggers: Self.union(triggers, other.triggers), rearm: rearm || other.rearm,
                   eventStarted: eventStarted ?? other.eventStarted,
                   declaredNodes: declaredNodes + other.declaredNodes)
        }

        /// `first`, then each of `second` not already there, in order.
        static func union(_ first: [String], _ second: [String]) -> [String] {
            var all = first
            for trigger in second where !all.contains(trigger) { all.append(trigger) }
            return all
        }
    }

    /// Waits for the wake eventfd, inotify or the exit of a process a grant lasts for, until
    /// the next periodic run or retry is due (then nothing is ready).
    private func wait() throws(SystemCallError) -> Ready {
        let watched = Array(holders)
        var interests = [Poll.Interest.readable(owner.wakeDescriptor)]
        if let watch { interests.append(.readable(watch.descriptor)) }
        let fixed = interests.count
        interests += watched.map { .readable($0.value) }
        let events = try Poll.wait(interests, until: nextDue()) ?? Array(repeating: 0, count: interests.count)
        return Ready(wake: events[0] != 0, files: fixed > 1 && events[1] != 0,
                     exited: watched.indices.filter { events[fixed + $0] != 0 }.map { (watched[$0].key, watched[$0].value) })
    }

    /// What the ready descriptors and the timers ask for.
    private func gather(_ ready: Ready) -> Wakeup {
        let exits = processExits(ready.exited)
        if ready.wake {
            var counter: UInt64 = 0
            _ = Glibc.read(owner.wakeDescriptor, &counter, MemoryLayout<UInt64>.size)
        }
        let timers = Wakeup(triggers: timersDue())
        guard let watch, ready.files else { return exits.merged(with: timers) }
        return exits.merged(with: timers).merged(with: fileEvents(watch))
    }

    /// Closes the pidfds of the processes that exited: their grants end in the run below.
    private func processExits(_ exited: [(holder: ProcessHolder, pidfd: CInt)]) -> Wakeup {
        guard !exited.isEmpty else { return Wakeup() }
        let started = MonotonicClock.microseconds()
        for (holder, pidfd) in exited {
            Socket.close(pidfd)
            holders[holder] = nil
            log.debug("a process a once grant lasts for exited", ["pid": String(holder.pid)])
        }
        return Wakeup(triggers: ["process-exit"], eventStarted: started)
    }

    /// The timers that came due: a retry, the periodic run (scheduled anew).
    private func timersDue() -> [String] {
        let now = ContinuousClock.now
        var due: [String] = []
        if let retry = retryDue, now >= retry {
            retryDue = nil
            due.append("retry")
        }
        if let periodic = periodicDue, now >= periodic {
            schedulePeriodic()
            due.append("periodic")
        }
        return due
    }

    /// What the watched directories' events ask for.
    private func fileEvents(_ watch: DirectoryWatch) -> Wakeup {
        var wakeup = Wakeup()
        for event in watch.drain() { wakeup = wakeup.merged(with: fileEvent(event, watch: watch)) }
        return wakeup
    }

    /// A ledger change rearms; a node directory event is a declared node's event (DEBUG
    /// builds only declare nodes); a policy file's change asks for a reload and a run.
    private func fileEvent(_ event: DirectoryWatch.Event, watch: DirectoryWatch) -> Wakeup {
        let ignored = event.mask & UInt32(IN_IGNORED) != 0
        if ignored {
            log.warning("a watched directory went away; its changes are no longer noticed", ["directory": event.path])
        }
        switch event.purpose {
        case .ledger:
            return Wakeup(rearm: true)
        case .nodes:
            let started = MonotonicClock.microseconds()
            // An overflow or the directory gone: anything may have changed.
            guard !event.path.isEmpty, !ignored else { return Wakeup(triggers: ["nodes"], eventStarted: started) }
            let gone = event.mask & (UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM)) != 0
            let node = HotplugEvent(action: gone ? "remove" : "add", subsystem: "", devnode: event.path, seqnum: 0,
                                    kernelArrival: nil, received: MonotonicClock.microseconds())
            return Wakeup(eventStarted: started, declaredNodes: [node])
        case .policy:
            guard policyMatters(event, watch: watch) else { return Wakeup() }
            return Wakeup(triggers: ["policy"], eventStarted: MonotonicClock.microseconds())
        }
    }

    /// Does the mailbox's jobs, then the run the wakeup and the mailbox ask for, then looks
    /// again at the expiry timer and the holders if anything may have changed them.
    private func act(on wakeup: Wakeup, mail: LiveEnforcer.Mailbox) {
        for job in mail.jobs { perform(job) }
        let triggers = Wakeup.union(wakeup.triggers, mail.triggers)
        if mail.triggers.contains("expiry") { expiryTimer.fired() }
        let arrivals = (mail.hotplug.events + wakeup.declaredNodes).map { $0.kernelArrival ?? $0.received }
        let eventStarted = ([wakeup.eventStarted].compactMap { $0 } + arrivals).min()
        if wakeup.triggers.contains("policy") && !mail.triggers.contains("policy") {
            // From inotify (a SIGHUP has reloaded it already): read it now, say so, then apply it.
            owner.options.reloadPolicy?("inotify")
        }
        let ran = enforce(triggers, hotplug: mail.hotplug, declaredNodes: wakeup.declaredNodes,
                          eventStarted: eventStarted)
        owner.ran(mail.jobs.map(\.name) + (ran ?? []))
        if wakeup.rearm || !mail.jobs.isEmpty || ran != nil {
            rearmExpiry()
            watchHolders()
        }
    }

    /// A full reconcile when anything asks for one, else a pass over the nodes of the node
    /// events; the triggers of what ran (nil: nothing did).
    private func enforce(_ triggers: [String], hotplug: NodeEventQueue, declaredNodes: [HotplugEvent],
                         eventStarted: UInt64?) -> [String]? {
        let udevEvents = hotplug.events
        // Node events alone get a pass over their devices; with anything that asks for a
        // full reconcile (or more events than the queue keeps) they ride along with it.
        let nodeLabels = (udevEvents.isEmpty && !hotplug.overflowed ? [] : ["hotplug"])
            + (declaredNodes.isEmpty ? [] : ["nodes"])
        if !triggers.isEmpty || hotplug.overflowed {
            let full = Wakeup.union(triggers, nodeLabels)
            let changed = reconcile(full, hotplug: udevEvents, eventStarted: eventStarted)
            if hotplug.overflowed { resyncAfterOverflow(dropped: hotplug.dropped) }
            if !nodeLabels.isEmpty || full.contains("nodes") {
                owner.nodesApplied(NodesApplied(paths: [], permissions: Set(LiveEnforcer.subsystemPermissions.values),
                                                changed: changed, full: true))
            }
            return full
        }
        guard !nodeLabels.isEmpty else { return nil }
        applyNodes(udevEvents + declaredNodes, label: nodeLabels.joined(separator: ","), eventStarted: eventStarted)
        if !udevEvents.isEmpty { audit(udevEvents) }
        return nodeLabels
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

    /// The earlier of the periodic run and a retry; nil: none due.
    private func nextDue() -> ContinuousClock.Instant? {
        if periodicDue == nil && retryDue == nil && owner.options.reconcileInterval != nil { schedulePeriodic() }
        return [periodicDue, retryDue].compactMap { $0 }.min()
    }
}
