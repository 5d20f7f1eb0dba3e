/// What went wrong, as the error frame carries it:
/// `{"version":1,"id":N,"type":"error","code":"...","context":"...","reason":"..."}`.
///
/// The shape follows USBGuard's IPC `Exception` (context, reason, request id): `code`
/// is for programs, `context` names the place (a JSON path such as
/// `$.permissions[1]`, a byte offset, or the request type), `reason` is a sentence
/// for people.
public struct ProtocolError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: ErrorCode
    public var context: String
    public var reason: String

    public init(_ code: ErrorCode, context: String, reason: String) {
        self.code = code
        self.context = context
        self.reason = reason
    }

    /// "context: reason", as USBGuard prints its exceptions.
    public var description: String { "\(context): \(reason)" }
}

/// The machine-readable kind of an error frame. A struct over its name so that a
/// client still reads codes a newer broker adds.
public struct ErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    // Broken messages. The broker answers and then closes the connection: after a
    // framing or decoding error it cannot trust where the next message starts.

    /// Not JSON, not UTF-8, an empty line, or not a JSON object.
    public static let badJSON = ErrorCode(rawValue: "bad-json")
    /// Valid JSON of the wrong shape: unknown, missing or duplicate field, wrong type,
    /// value out of range.
    public static let badMessage = ErrorCode(rawValue: "bad-message")
    /// `version` is not one this broker speaks; the reason names the supported one.
    public static let unsupportedVersion = ErrorCode(rawValue: "unsupported-version")
    /// `type` names no request this broker knows.
    public static let unknownType = ErrorCode(rawValue: "unknown-type")
    /// More than the size limit arrived before a newline.
    public static let tooLarge = ErrorCode(rawValue: "too-large")
    /// The connection ended in the middle of a message.
    public static let truncated = ErrorCode(rawValue: "truncated")
    /// A message stayed incomplete, or the connection idle, longer than the broker waits.
    public static let timeout = ErrorCode(rawValue: "timeout")
    /// The broker serves its maximum number of connections; try again later.
    public static let busy = ErrorCode(rawValue: "busy")

    // Well-formed requests that cannot be served. The connection stays open.

    /// A permission name this broker does not know.
    public static let unknownPermission = ErrorCode(rawValue: "unknown-permission")
    public static let noSuchUser = ErrorCode(rawValue: "no-such-user")
    /// The peer may not do this (audited as a `refused` event).
    public static let permissionDenied = ErrorCode(rawValue: "permission-denied")
    /// `approve` / `reject` name no request that is waiting (unknown, or already resolved).
    public static let noSuchRequest = ErrorCode(rawValue: "no-such-request")
    /// A user, device or term in the request does not exist or cannot be.
    public static let badArgument = ErrorCode(rawValue: "bad-argument")
    /// Another process held the ledger too long; try again.
    public static let ledgerBusy = ErrorCode(rawValue: "ledger-busy")
    /// The broker's ledger cannot be used (corrupt, disk full, newer schema).
    public static let ledgerUnusable = ErrorCode(rawValue: "ledger-unusable")
    /// What the request asks for is not there now: gpsd not running, no receiver, no fix
    /// (`location`). Asking again later may work.
    public static let unavailable = ErrorCode(rawValue: "unavailable")
    /// The request is valid but this broker does not serve it yet.
    public static let notImplemented = ErrorCode(rawValue: "not-implemented")
    /// The broker failed on its side (ledger, probe); the reason says what.
    public static let `internal` = ErrorCode(rawValue: "internal")

    /// Codes after which the broker closes the connection.
    public static let closing: Set<ErrorCode> = [
        .badJSON, .badMessage, .unsupportedVersion, .unknownType, .tooLarge, .truncated, .timeout, .busy,
    ]

    public var closesConnection: Bool { Self.closing.contains(self) }
    public var description: String { rawValue }
}
