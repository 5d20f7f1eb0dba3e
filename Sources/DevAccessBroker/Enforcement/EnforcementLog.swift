import DevAccessSystem
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement

/// How the daemon logs engine runs: one `enforcement run` entry per run (why, what it
/// did, how long it took), then one entry per expired grant, ACL change and problem.
/// Drift and notes repeat on every run while they last, so each is logged at notice/info
/// when it first appears and at debug afterwards. Confined to the enforcement worker.
struct EnforcementLog {
    let log: BrokerLog
    private var knownDrift: Set<String> = []
    private var knownNotes: Set<String> = []

    init(log: BrokerLog) {
        self.log = log
    }

    struct Run {
        /// What asked for the run: startup, hotplug, nodes, expiry, periodic, retry, or an
        /// operation's name.
        var trigger: String
        var microseconds: UInt64
        /// Kernel uevent (or udev event) arrival to the end of the run, for hotplug runs.
        var eventToDone: UInt64?
        /// Routine runs that changed nothing are logged at debug.
        var routine: Bool
        /// A hotplug pass's nodes (comma-separated); nil for a full run.
        var nodes: String? = nil
    }

    mutating func record(_ report: EnforcementReport, _ run: Run) {
        let eventful = !report.changedNothing || !report.problems.isEmpty
        let level: BrokerLog.Level = eventful || !run.routine ? .info : .debug
        let duration = Self.milliseconds(run.microseconds)
        if let nodes = run.nodes {
            log.log(level, "enforcement run", [
                "trigger": run.trigger, "expired": String(report.expired.count), "changes": String(report.changes.count),
                "problems": String(report.problems.count), "drift": String(report.drift.count), "duration_ms": duration,
                "ended_by_policy": String(report.endedByPolicy.count),
                "event_to_done_ms": run.eventToDone.map(Self.milliseconds) ?? "-", "nodes": nodes,
            ])
        } else if let latency = run.eventToDone {
            log.log(level, "enforcement run", [
                "trigger": run.trigger, "expired": String(report.expired.count), "changes": String(report.changes.count),
                "problems": String(report.problems.count), "drift": String(report.drift.count), "duration_ms": duration,
                "ended_by_policy": String(report.endedByPolicy.count), "event_to_done_ms": Self.milliseconds(latency),
            ])
        } else {
            log.log(level, "enforcement run", [
                "trigger": run.trigger, "expired": String(report.expired.count), "changes": String(report.changes.count),
                "problems": String(report.problems.count), "drift": String(report.drift.count), "duration_ms": duration,
                "ended_by_policy": String(report.endedByPolicy.count),
            ])
        }
        let now = Date()
        for grant in report.expired {
            // How long after its expiry the grant was ended: the timer's precision, or the
            // downtime for grants ended at start-up.
            let late = grant.expires.map { UInt64(max(0, now.timeIntervalSince($0)) * 1_000_000) }
            log.info("grant expired", [
                "grant": String(grant.id), "uid": String(grant.subject.uid), "user": grant.subject.name,
                "permission": grant.permission.rawValue, "expires": grant.expires.map(ISOTime.format) ?? "-",
                "ended_after_ms": late.map(Self.milliseconds) ?? "-",
                "while_pid": grant.holder.map { String($0.pid) } ?? "-",
            ])
        }
        for ended in report.endedByPolicy {
            log.notice("grant ended by policy", [
                "grant": String(ended.grant.id), "uid": String(ended.grant.subject.uid), "user": ended.grant.subject.name,
                "permission": ended.grant.permission.rawValue, "rule": ended.rule ?? "built-in default",
                "reason": ended.reason,
            ])
        }
        for change in report.changes {
            log.info(change.message, [
                "action": change.action.rawValue, "node": change.nodePath, "uid": String(change.uid),
                "user": change.userName, "permission": change.permission?.rawValue ?? "-", "device": change.deviceID,
                "grant": change.grantID.map(String.init) ?? "-",
            ])
        }
        for problem in report.problems {
            log.warning(problem.message, [
                "kind": problem.kind.rawValue, "node": problem.nodePath, "uid": String(problem.uid),
                "user": problem.userName, "permission": problem.permission?.rawValue ?? "-",
                "device": problem.deviceID ?? "-",
            ])
        }
        let drift = Set(report.drift.map(\.message))
        for item in report.drift {
            log.log(knownDrift.contains(item.message) ? .debug : .notice, item.message, [
                "kind": item.kind.rawValue, "node": item.nodePath, "uid": String(item.uid), "user": item.userName,
                "permission": item.permission.rawValue, "device": item.deviceID,
            ])
        }
        knownDrift = drift
        for note in report.notes {
            log.log(knownNotes.contains(note) ? .debug : .info, note)
        }
        knownNotes = Set(report.notes)
    }

    func failed(_ error: EnforcementError, trigger: String, retryIn: Duration) {
        log.error("enforcement run failed", ["trigger": trigger, "error": error.description,
                                             "retry_in_s": String(retryIn.components.seconds)])
    }

    static func milliseconds(_ microseconds: UInt64) -> String {
        let tenths = (microseconds + 50) / 100
        return "\(tenths / 10).\(tenths % 10)"
    }
}
