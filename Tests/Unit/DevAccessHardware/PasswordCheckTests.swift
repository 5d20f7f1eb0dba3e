import Foundation
import Testing
import DevAccessSystem
import DevAccessTestSupport
import DevAccessPAM

/// PAM with a real user and a real password (pam_unix through the `devaccess`
/// service file the project ships).
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates a user with a password and a PAM service file"))
struct PasswordCheckTests {
    let user: TestUser
    /// A throwaway service name, so a test never depends on (or changes) an installed file.
    let service = "devaccess-test-\(getpid())"

    init() throws {
        user = try TestUser("pam")
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../config/pam.d/devaccess").standardized.path
        // Without the service file PAM would silently use /etc/pam.d/other instead.
        let copied = try TestProcess.run("/bin/cp", [shipped, "/etc/pam.d/\(service)"])
        try #require(copied.status == 0, "cp \(shipped): \(copied.stderr)")
        try user.setPassword("correct horse 42")
    }

    @Test func rightPasswordPassesWrongOneIsRejected() throws {
        defer { TestProcess.cleanup("rm", ["-f", "/etc/pam.d/\(service)"]) }
        try PasswordCheck.verify(user: user.name, password: "correct horse 42", service: service)
        do {
            try PasswordCheck.verify(user: user.name, password: "wrong", service: service)
            Issue.record("a wrong password was accepted")
        } catch {
            #expect(error.isRejection, "\(error)")
            #expect(error.stage == "authenticate")
        }
    }

    @Test func lockedAccountIsRejected() throws {
        defer { TestProcess.cleanup("rm", ["-f", "/etc/pam.d/\(service)"]) }
        try PasswordCheck.verify(user: user.name, password: "correct horse 42", service: service)
        try #require(try TestProcess.run("/usr/sbin/usermod", ["-L", user.name]).status == 0)
        do {
            try PasswordCheck.verify(user: user.name, password: "correct horse 42", service: service)
            Issue.record("a locked account was accepted")
        } catch {
            // pam_unix refuses a locked ('!'-prefixed) hash at authentication: a rejection.
            #expect(error.isRejection, "\(error)")
            #expect(error.stage == "authenticate")
        }
    }

    /// pam_faillock in the shipped file: ten wrong passwords lock the user out of the
    /// service, the right one included, until the lock ends or an administrator resets it.
    @Test func tenWrongPasswordsLockTheUserUntilReset() throws {
        defer { TestProcess.cleanup("rm", ["-f", "/etc/pam.d/\(service)"]) }
        for _ in 0..<10 {
            #expect(throws: PasswordCheck.Failure.self) {
                try PasswordCheck.verify(user: user.name, password: "guess", service: service)
            }
        }
        do {
            try PasswordCheck.verify(user: user.name, password: "correct horse 42", service: service)
            Issue.record("the right password passed while pam_faillock should lock the user")
        } catch {
            #expect(error.isRejection, "\(error)")
        }
        let reset = try TestProcess.run("/usr/sbin/faillock", ["--user", user.name, "--reset"])
        try #require(reset.status == 0, "faillock --reset: \(reset.stderr)")
        try PasswordCheck.verify(user: user.name, password: "correct horse 42", service: service)
    }
}
