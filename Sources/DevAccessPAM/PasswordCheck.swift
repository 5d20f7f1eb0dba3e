import CPam

/// Proves that the person at the terminal is the user, with their own password,
/// through PAM (the `devaccess` service, /etc/pam.d/devaccess). Used by policy
/// `auth_self`; the broker calls it as root, so pam_unix can read the shadow file.
public enum PasswordCheck {
    public static let service = "devaccess"

    public struct Failure: Error, Equatable, CustomStringConvertible {
        /// The PAM status code (PAM_AUTH_ERR = 7, PAM_USER_UNKNOWN = 10, ...).
        public var code: Int32
        public var stage: String
        public var message: String

        /// Wrong password or unknown user: the answer is "no", not a broken system.
        public var isRejection: Bool { code == PAM_AUTH_ERR || code == PAM_USER_UNKNOWN || code == PAM_MAXTRIES }

        public var description: String { "PAM \(stage) failed: \(message)" }
    }

    public static func verify(user: String, password: String, service: String = service) throws(Failure) {
        var stage: UnsafePointer<CChar>?
        let code = devaccess_pam_verify(service, user, password, &stage)
        guard code == PAM_SUCCESS else {
            throw Failure(code: code, stage: stage.map { String(cString: $0) } ?? "start",
                          message: devaccess_pam_strerror(code).map { String(cString: $0) } ?? "error \(code)")
        }
    }
}
