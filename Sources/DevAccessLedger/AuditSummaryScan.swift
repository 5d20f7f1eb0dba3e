import DevAccessCore

/// `audit --summary` in one pass over the matching rows, counted in memory.
///
/// A SQL GROUP BY over expressions sorts every row and opens the details JSON of each
/// decision (about as long again as the scan); here the rows are read once, in seq order,
/// each column's few distinct values are turned into small integers without making a
/// String per row, and only decision, grant and run_end details are looked into.
struct AuditSummaryScan {
    /// What one summary row is counted by (the old GROUP BY's columns), as interned ids.
    private struct GroupKey: Hashable {
        var permission: Int32
        var uid: Int64?
        var type: Int32
        var decision: Int32
        var how: Int32
        /// A request event's `stage` (received, prompt, answered): one request writes several.
        var stage: Int32 = 0
        /// A run recorded with no permission of its own (`devaccess run`): the permissions
        /// its details list, counted under each of them.
        var runPermissions: Int32 = 0
    }

    private struct Group {
        var count: Int64 = 0
        var first: Int64 = .max
        var last: Int64 = .min
        var runMicroseconds: Int64 = 0
        /// The user's name as the newest event of the group records it.
        var name: Int32 = 0

        mutating func tally(seq: Int64, name: Int32, ran: Int64) {
            count += 1
            first = min(first, seq)
            if seq > last {
                last = seq
                self.name = name
            }
            runMicroseconds += ran
        }
    }

    private struct ProgramCount {
        var count: Int64 = 0
        var first: Int64 = .max
        var last: Int64 = .min

        mutating func tally(seq: Int64) {
            count += 1
            first = min(first, seq)
            last = max(last, seq)
        }
    }

    private var permissions = ColumnInterner()
    private var types = ColumnInterner()
    private var names = ColumnInterner()
    private var programs = ColumnInterner()
    /// `decision` and `how` values share one table.
    private var words = ColumnInterner()
    private var permissionLists = ColumnInterner()
    private var groups: [GroupKey: Group] = [:]
    private var programCounts: [Int32: ProgramCount] = [:]

    /// The columns `add` reads, in order.
    static let columns = """
        seq, type, permission, COALESCE(subject_uid, actor_uid), COALESCE(subject_name, actor_name), program,
        CASE WHEN type IN ('decision', 'grant', 'run_end', 'request') OR (type = 'run_start' AND permission IS NULL)
             THEN details END
        """

    mutating func add(_ row: borrowing SQLiteStatement) {
        let seq = row.int64(0) ?? 0
        let type = row.withBytes(1) { types.id($0) }
        var key = GroupKey(permission: row.withBytes(2) { permissions.id($0) }, uid: row.int64(3), type: type,
                           decision: 0, how: 0)
        var ran: Int64 = 0
        if !row.isNull(6) {
            let typeName = types.value(type)
            if typeName == AuditEventType.runEnd.rawValue || typeName == AuditEventType.runStart.rawValue {
                if typeName == AuditEventType.runEnd.rawValue {
                    ran = row.withBytes(6) { DetailsScan.value("duration_usec", in: $0) }.flatMap { Int64($0) } ?? 0
                }
                if key.permission == 0 {
                    key.runPermissions = row.withBytes(6) {
                        DetailsScan.valueID("permissions", in: $0, words: &permissionLists)
                    }
                }
            } else if typeName == AuditEventType.request.rawValue {
                key.stage = row.withBytes(6) { DetailsScan.valueID("stage", in: $0, words: &words) }
            } else {
                row.withBytes(6) { details in
                    key.decision = DetailsScan.valueID("decision", in: details, words: &words)
                    key.how = DetailsScan.valueID("how", in: details, words: &words)
                }
            }
        }
        let name = row.withBytes(4) { names.id($0) }
        groups[key, default: Group()].tally(seq: seq, name: name, ran: ran)
        if !row.isNull(5) {
            let program = row.withBytes(5) { programs.id($0) }
            programCounts[program, default: ProgramCount()].tally(seq: seq)
        }
    }

    /// The counts folded into the summary's rows, sorted as the report lists them.
    func summary() -> AuditSummary {
        var total = AuditCounts()
        var byPermission: [String: AuditCounts] = [:]
        var byUser: [UInt32?: (name: String, newest: Int64, counts: AuditCounts)] = [:]
        for (key, group) in groups {
            let type = types.value(key.type) ?? ""
            let decision = words.value(key.decision), how = words.value(key.how), stage = words.value(key.stage)
            func add(_ counts: inout AuditCounts) {
                counts.add(type: type, decision: decision, how: how, stage: stage, count: group.count, first: group.first,
                           last: group.last, runMicroseconds: group.runMicroseconds)
            }
            add(&total)
            let listed = (permissionLists.value(key.runPermissions) ?? "").split(separator: " ").map(String.init)
            for permission in listed.isEmpty ? [permissions.value(key.permission) ?? "-"] : listed {
                add(&byPermission[permission, default: AuditCounts()])
            }
            let uid = key.uid.flatMap(UInt32.init(exactly:))
            var user = byUser[uid] ?? (names.value(group.name) ?? "-", group.last, AuditCounts())
            if group.last > user.newest { (user.name, user.newest) = (names.value(group.name) ?? "-", group.last) }
            add(&user.counts)
            byUser[uid] = user
        }
        let top = programCounts.map { (program: programs.value($0.key) ?? "", counts: $0.value) }
            .sorted { $0.counts.count != $1.counts.count ? $0.counts.count > $1.counts.count
                : $0.program.utf8.lexicographicallyPrecedes($1.program.utf8) }
            .prefix(AuditSummary.topPrograms)
            .map { AuditProgramRow(program: $0.program, events: $0.counts.count, firstEvent: $0.counts.first,
                                   lastEvent: $0.counts.last) }
        return AuditSummary(
            total: total,
            permissions: byPermission.sorted { $0.key < $1.key }.map { AuditSummaryRow(key: $0.key, counts: $0.value) },
            users: byUser.sorted { ($0.value.name, $0.key ?? 0) < ($1.value.name, $1.key ?? 0) }
                .map { AuditSummaryRow(key: $0.value.name, uid: $0.key, counts: $0.value.counts) },
            programs: Array(top))
    }
}

/// A column's distinct values as small integers (0 is NULL). The values met most recently
/// are compared byte for byte first, so a run of rows with the same few values makes no
/// String and no allocation.
struct ColumnInterner {
    private var values: [String?] = [nil]
    private var bytes: [[UInt8]] = [[]]
    private var index: [[UInt8]: Int32] = [:]
    /// The ids met last, newest first.
    private var recent: [Int32] = []

    func value(_ id: Int32) -> String? { values[Int(id)] }

    mutating func id(_ buffer: UnsafeBufferPointer<UInt8>?) -> Int32 {
        guard let buffer else { return 0 }
        for (position, id) in recent.enumerated() where bytes[Int(id)].elementsEqual(buffer) {
            if position > 0 {
                recent.remove(at: position)
                recent.insert(id, at: 0)
            }
            return id
        }
        let key = Array(buffer)
        let id: Int32
        if let known = index[key] {
            id = known
        } else {
            id = Int32(values.count)
            values.append(String(decoding: key, as: UTF8.self))
            bytes.append(key)
            index[key] = id
        }
        recent.insert(id, at: 0)
        if recent.count > 4 { recent.removeLast() }
        return id
    }
}

/// Reads one string value from a stored `details` object without decoding all of it.
/// The writer (DetailsJSON) quotes every key and value and escapes every `"` inside them,
/// so `{"key":"` or `,"key":"` occurs only where the key is; a text with any backslash
/// (an escape), or not shaped like an object, goes to the full decoder, as on reading.
enum DetailsScan {
    static func value(_ key: String, in buffer: UnsafeBufferPointer<UInt8>?) -> String? {
        guard let buffer else { return nil }
        switch find(key, in: buffer) {
        case .found(let range): return String(decoding: UnsafeBufferPointer(rebasing: buffer[range]), as: UTF8.self)
        case .absent: return nil
        case .needsDecoder: return DetailsJSON.decode(String(decoding: buffer, as: UTF8.self))?[key]
        }
    }

    static func valueID(_ key: String, in buffer: UnsafeBufferPointer<UInt8>?, words: inout ColumnInterner) -> Int32 {
        guard let buffer else { return 0 }
        switch find(key, in: buffer) {
        case .found(let range): return words.id(UnsafeBufferPointer(rebasing: buffer[range]))
        case .absent: return 0
        case .needsDecoder:
            guard var text = DetailsJSON.decode(String(decoding: buffer, as: UTF8.self))?[key] else { return 0 }
            return text.withUTF8 { words.id($0) }
        }
    }

    private enum Found {
        case found(Range<Int>)
        case absent
        case needsDecoder
    }

    private static func find(_ key: String, in buffer: UnsafeBufferPointer<UInt8>) -> Found {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        guard buffer.first == UInt8(ascii: "{"), buffer.last == UInt8(ascii: "}"), !buffer.contains(backslash) else {
            return .needsDecoder
        }
        let pattern = Array(("\"" + key + "\":\"").utf8)
        let count = buffer.count
        var start = 1
        while start + pattern.count <= count {
            let before = buffer[start - 1]
            if buffer[start] == quote, before == UInt8(ascii: "{") || before == UInt8(ascii: ","),
               buffer[start..<(start + pattern.count)].elementsEqual(pattern) {
                let valueStart = start + pattern.count
                var end = valueStart
                while end < count, buffer[end] != quote { end += 1 }
                return end < count ? .found(valueStart..<end) : .needsDecoder
            }
            start += 1
        }
        return .absent
    }
}
