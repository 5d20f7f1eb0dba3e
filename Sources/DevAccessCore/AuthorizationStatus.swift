/// The status of one permission for one subject. Every state stays distinct:
/// `restricted` is not `denied`, and `limited` is not `authorized`.
public enum AuthorizationStatus: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// The subject can really open every device of the permission now.
    case authorized
    /// Access to some devices of the permission but not all (or reduced accuracy).
    case limited
    /// The subject or an admin said no, and the ledger remembers it.
    case denied
    /// A device exists, nobody has decided, and the subject has no access.
    case notDetermined
    /// Policy forbids it for this subject; the subject cannot change that.
    case restricted
    /// No device for this permission exists, or its service is unreachable.
    case unavailable

    public var description: String { rawValue }
}
