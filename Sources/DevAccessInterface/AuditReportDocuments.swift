import DevAccessCore
import FoundationEssentials
import Glibc

/// `audit-report`'s result (docs/json.md, "audit reports"): a page of events, a summary, or
/// one event with its place in the chain; `chain` says whether the chain verified when the
/// report was read (present on a report's first page).
public struct AuditReportDocument: Codable, Sendable, Hashable {
    public var ledger: String
    /// `events`, `summary` or `event`.
    public var mode: String
    public var chain: AuditVerifyDocument?
    /// The archive files the report read (`archives` of the query), each verified as
    /// `audit --verify --archive-file` does (present with `chain`).
    public var archives: [ArchiveVerifyDocument]?
    public var events: [AuditEventDocument]?
    /// `events`: ask again with `after` = this for the next page; absent on the last page.
    public var next: Int64?
    /// The newest event stored when the page was read (a follower continues from there).
    public var head: Int64?
    public var summary: AuditSummary?
    public var event: AuditEventDocument?
    public var position: AuditChainPosition?

    public init(ledger: String, mode: String) {
        self.ledger = ledger
        self.mode = mode
    }
}

/// One audit event as reports show it. Times are UTC (`time`: ISO 8601 with microseconds,
/// `timeUsec`: microseconds since 1970); `decision` and `how` are lifted from the details
/// of decision and grant events.
public struct AuditEventDocument: Codable, Sendable, Hashable {
    public var seq: Int64
    public var time: String
    public var timeUsec: Int64
    public var type: String
    public var actor: String?
    public var actorUid: UInt32?
    public var user: String?
    public var uid: UInt32?
    public var permission: String?
    public var device: String?
    public var deviceName: String?
    public var program: String?
    public var node: String?
    public var decision: String?
    public var how: String?
    public var details: [String: String]
    public var prevHash: String
    public var hash: String

    /// The engine fills in the rest from the stored event (DevAccessEngine's EngineDocuments.swift).
    public init(seq: Int64, timeUsec: Int64, type: String, details: [String: String], prevHash: String, hash: String) {
        self.seq = seq
        self.timeUsec = timeUsec
        time = Self.utc(microseconds: timeUsec)
        self.type = type
        self.details = details
        self.prevHash = prevHash
        self.hash = hash
    }

    /// At least the bytes of this event's JSON encoding: every string as if each escapable
    /// character took six bytes (`\u001f`), plus the keys, numbers and punctuation.
    public var encodedSizeBound: Int {
        func bound(_ text: String?) -> Int {
            guard let text else { return 0 }
            func escaped(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
                var size = 0
                for byte in bytes { size += byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x2F ? 6 : 1 }
                return size
            }
            // Quotes, key and separators; the bytes read in place (a report bounds a million of these).
            return 2 + 24 + (text.utf8.withContiguousStorageIfAvailable(escaped)
                ?? Array(text.utf8).withUnsafeBufferPointer(escaped))
        }
        var size = 512  // keys, integers, braces
        let texts: [String?] = [time, type, actor, user, permission, device, deviceName, program, node, decision, how,
                                prevHash, hash]
        for text in texts {
            size += bound(text)
        }
        for (key, value) in details { size += bound(key) + bound(value) }
        return size
    }

    /// `2026-11-30T16:17:03.123456Z`.
    public static func utc(microseconds: Int64) -> String {
        var seconds = time_t(microseconds.quotientAndRemainder(dividingBy: 1_000_000).quotient)
        var micro = microseconds % 1_000_000
        if micro < 0 {
            micro += 1_000_000
            seconds -= 1
        }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(microseconds) }
        let year = Int(parts.tm_year) + 1900
        guard (0...9999).contains(year) else {
            let fraction = String(micro)
            return "\(year)-\(parts.tm_mon + 1)-\(parts.tm_mday)T\(parts.tm_hour):\(parts.tm_min):\(parts.tm_sec)."
                + String(repeating: "0", count: 6 - fraction.count) + fraction + "Z"
        }
        // Written digit by digit into 27 bytes: reports format a million of these.
        return String(unsafeUninitializedCapacity: 27) { buffer in
            func put(_ value: Int, _ digits: Int, at offset: Int) {
                var rest = value
                for position in stride(from: offset + digits - 1, through: offset, by: -1) {
                    buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
            }
            put(year, 4, at: 0)
            put(Int(parts.tm_mon) + 1, 2, at: 5)
            put(Int(parts.tm_mday), 2, at: 8)
            put(Int(parts.tm_hour), 2, at: 11)
            put(Int(parts.tm_min), 2, at: 14)
            put(Int(parts.tm_sec), 2, at: 17)
            put(Int(micro), 6, at: 20)
            (buffer[4], buffer[7], buffer[10]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "T"))
            (buffer[13], buffer[16], buffer[19], buffer[26]) = (UInt8(ascii: ":"), UInt8(ascii: ":"), UInt8(ascii: "."),
                                                                UInt8(ascii: "Z"))
            return 27
        }
    }
}
