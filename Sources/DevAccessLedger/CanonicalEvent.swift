/// The bytes an audit event's hash covers.
///
/// Format (version 1):
///
///     "devaccess-audit-v1\n"
///     then, for each field in the fixed order of `fields` whose value is not NULL:
///     <name> ":" <decimal byte count of value> ":" <value bytes> "\n"
///
/// Integers are written in decimal ASCII (`-` for negatives), text as its stored
/// UTF-8 bytes. The byte count makes any value bytes (colons, newlines) unambiguous,
/// and field names are fixed, so two different events never encode alike. NULL
/// fields are left out rather than encoded as empty, which keeps NULL distinct from
/// "" and lets a later schema add a nullable column without changing old hashes.
///
/// The event hash is `SHA-256(raw 32 bytes of prev_hash || canonical bytes)`, stored
/// as 64 lowercase hex digits; the first event's `prev_hash` is 64 zeros.
struct CanonicalEvent {
    enum Value {
        case integer(Int64)
        case text([UInt8])
    }

    /// Field names, in encoding order; also the `audit_events` column names.
    static let fields = [
        "seq", "time_usec", "type", "actor_uid", "actor_name", "subject_uid", "subject_name",
        "permission", "device_id", "device_name", "program", "node_path", "details",
    ]
    /// Fields stored as INTEGER.
    static let integerFields: Set<String> = ["seq", "time_usec", "actor_uid", "subject_uid"]

    private static let header = Array("devaccess-audit-v1\n".utf8)
    private static let encodedNames = fields.map { Array($0.utf8) }

    /// One value per entry of `fields`; nil = NULL.
    var values: [Value?]

    init(values: [Value?]) {
        precondition(values.count == Self.fields.count, "canonical event needs \(Self.fields.count) values")
        self.values = values
    }

    /// The fields of an event about to be stored as `seq`.
    init(seq: Int64, timeUsec: Int64, event: AuditEvent, detailsJSON: String) {
        func text(_ s: String?) -> Value? { s.map { .text(Array($0.utf8)) } }
        self.init(values: [
            .integer(seq), .integer(timeUsec), text(event.type.rawValue),
            event.actor.map { .integer(Int64($0.uid)) }, text(event.actor?.name),
            event.subject.map { .integer(Int64($0.uid)) }, text(event.subject?.name),
            text(event.permission?.rawValue), text(event.deviceID), text(event.deviceName),
            text(event.program), text(event.nodePath), text(detailsJSON),
        ])
    }

    /// The same event numbered `seq` instead (verify uses it to find where content came from).
    func renumbered(_ seq: Int64) -> CanonicalEvent {
        var copy = self
        copy.values[0] = .integer(seq)
        return copy
    }

    var bytes: [UInt8] {
        var out = Self.header
        out.reserveCapacity(256)
        for (index, value) in values.enumerated() {
            guard let value else { continue }
            let payload: [UInt8]
            switch value {
            case .integer(let number): payload = Array(String(number).utf8)
            case .text(let text): payload = text
            }
            out += Self.encodedNames[index]
            out.append(UInt8(ascii: ":"))
            out += Array(String(payload.count).utf8)
            out.append(UInt8(ascii: ":"))
            out += payload
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }
}
