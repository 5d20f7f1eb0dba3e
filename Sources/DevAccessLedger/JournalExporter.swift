import DevAccessSystem
import Glibc
import DevAccessJournal

/// Whether appended events are also sent to the systemd journal.
public enum JournalExport: Sendable, Hashable {
    case enabled
    /// For tests, benchmarks and bulk imports that must not flood the journal.
    case disabled
}

/// Sends committed audit events to the journal as structured entries.
///
/// Fields: `MESSAGE`, `MESSAGE_ID` (per event type, see `AuditEventType`), `PRIORITY`,
/// `SYSLOG_IDENTIFIER=devaccess`, and `DEVACCESS_SEQ`, `DEVACCESS_EVENT`,
/// `DEVACCESS_TIME_USEC`, `DEVACCESS_ACTOR_UID`, `DEVACCESS_ACTOR_NAME`,
/// `DEVACCESS_SUBJECT_UID`, `DEVACCESS_SUBJECT_NAME`, `DEVACCESS_PERMISSION`,
/// `DEVACCESS_DEVICE_ID`, `DEVACCESS_DEVICE_NAME`, `DEVACCESS_PROGRAM`, `DEVACCESS_NODE`,
/// `DEVACCESS_DETAILS` (the JSON), `DEVACCESS_PREV_HASH`, `DEVACCESS_HASH` — the last two
/// let a log pipeline hold its own copy of the chain and spot a rewritten ledger.
/// Absent values are left out.
///
/// The ledger is the record; the journal is a copy. A failed send is ignored, never
/// reported as a failed write (the event is already committed).
enum JournalExporter {
    static func fields(for recorded: RecordedAuditEvent) -> [String] {
        let event = recorded.event
        var fields = [
            "MESSAGE=\(message(for: recorded))",
            "MESSAGE_ID=\(event.type.messageID)",
            "PRIORITY=\(event.type.journalPriority)",
            "SYSLOG_IDENTIFIER=devaccess",
            "DEVACCESS_SEQ=\(recorded.seq)",
            "DEVACCESS_EVENT=\(event.type.rawValue)",
        ]
        if let micro = try? Timestamp.microseconds(event.time) { fields.append("DEVACCESS_TIME_USEC=\(micro)") }
        func add(_ name: String, _ value: String?) {
            if let value { fields.append("DEVACCESS_\(name)=\(value)") }
        }
        add("ACTOR_UID", event.actor.map { String($0.uid) })
        add("ACTOR_NAME", event.actor?.name)
        add("SUBJECT_UID", event.subject.map { String($0.uid) })
        add("SUBJECT_NAME", event.subject?.name)
        add("PERMISSION", event.permission?.rawValue)
        add("DEVICE_ID", event.deviceID)
        add("DEVICE_NAME", event.deviceName)
        add("PROGRAM", event.program)
        add("NODE", event.nodePath)
        add("DETAILS", recorded.detailsJSON)
        add("PREV_HASH", recorded.prevHash)
        add("HASH", recorded.hash)
        return fields
    }

    /// A one-line human summary, e.g. "devaccess revoke: camera for alice (1000) by root (0)".
    static func message(for recorded: RecordedAuditEvent) -> String {
        let event = recorded.event
        var text = "devaccess \(event.type.rawValue)"
        var parts: [String] = []
        if let permission = event.permission { parts.append(permission.rawValue) }
        if let subject = event.subject { parts.append("for \(subject)") }
        if let device = event.deviceName ?? event.deviceID { parts.append("device \(device)") }
        if let node = event.nodePath { parts.append("node \(node)") }
        if let actor = event.actor { parts.append("by \(actor)") }
        if !parts.isEmpty { text += ": " + parts.joined(separator: " ") }
        return text + " [seq \(recorded.seq)]"
    }

    static func send(_ events: [RecordedAuditEvent]) {
        for event in events { Journal.send(fields(for: event)) }
    }
}
