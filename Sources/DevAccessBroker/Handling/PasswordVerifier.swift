import Foundation
import DevAccessSystem

/// Checks a password through PAM on a thread of its own: pam_unix sleeps about two
/// seconds after a wrong password, which must not hold a handler thread.
struct PasswordVerifier: Sendable {
    enum Outcome: Sendable, Equatable {
        case accepted
        /// Wrong password, unknown or locked user: the answer is no.
        case rejected
        /// PAM could not check (missing service file, broken stack): not the user's fault.
        case failed(String)
    }

    /// The PAM service (/etc/pam.d/SERVICE).
    var service: String

    func verify(user: String, password: String) async -> Outcome {
        let service = self.service
        return await withCheckedContinuation { continuation in
            let thread = Thread {
                do throws(PasswordCheck.Failure) {
                    try PasswordCheck.verify(user: user, password: password, service: service)
                    continuation.resume(returning: .accepted)
                } catch {
                    continuation.resume(returning: error.isRejection ? .rejected : .failed(error.description))
                }
            }
            thread.name = "devaccessd pam"
            thread.start()
        }
    }
}
