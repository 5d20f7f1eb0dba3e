import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// `devaccess request` end to end: the real daemon, the real CLI as a real user on a
/// pseudo-terminal answering the broker's prompt, real ACL changes checked with a real
/// open(). A dismissed, interrupted or timed-out prompt must never become a denial.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and PAM files"))
struct RequestConsentTests {
    static let ask = "[camera]\nDefault=ask\n[microphone]\nDefault=ask\n"
    static var program: String { DaemonTests.realPath(TestProcess.devaccessBinary) }

    @Test func askThenAllowOnceForAnHourOrAlwaysOpensTheNode() throws {
        let setup = try RequestSetup(policy: Self.ask)
        // All alive together: a user deleted after its turn would hand its uid to the next.
        let users = try ["o", "f", "a"].map { try TestUser("ask\($0)") }
        for (user, (key, seconds)) in zip(users, [("o", Int64?.some(300)), ("f", 3600), ("a", nil)]) {
            #expect(try !user.canOpen(setup.camera, .readWrite))
            let run = try user.onTerminal(["request", "camera", "--reason", "video call"] + setup.socket,
                                          answers: [("Answer", "\(key)\n")])
            #expect(run.exit == 0, "\(run.output)")
            #expect(run.prompts == 1)
            // The prompt says what, which devices, which program and why.
            #expect(run.output.contains("to use the camera?"))
            #expect(run.output.contains("Test Camera [camera:test-video-index0]"))
            #expect(run.output.contains("Allow \(Self.program)"), "\(run.output)")
            #expect(run.output.contains("reason: video call"))
            #expect(run.output.contains("requested by: \(user.name) (uid \(user.uid))"))
            #expect(run.output.contains("camera      authorized"), "the new status is printed")
            #expect(try user.canOpen(setup.camera, .readWrite), "the kernel lets \(user.name) in")
            #expect(try !user.canOpen(setup.microphone, .read), "and only into what was asked for")

            let grants = try setup.grants(user)
            try #require(grants.count == 1)
            let grant = grants[0]
            #expect(grant.decision == .allow && grant.method == .consent && grant.permission == .camera)
            #expect(grant.decidedBy == Principal(uid: user.uid, name: user.name))
            if let seconds {
                #expect(grant.scope == .until)
                let length = try #require(grant.expires).timeIntervalSince(grant.created)
                #expect(abs(length - Double(seconds)) < 2, "\(key): \(length)")
            } else {
                #expect(grant.scope == .always && grant.expires == nil)
            }
            // Audited: the request, the prompt's outcome, the decision.
            let stages = try setup.requestEvents(user).compactMap { $0.details["stage"] }
            #expect(stages == ["received", "prompt"], "\(stages)")
            let decisions = try setup.ledger().events().map(\.event).filter {
                $0.type == .decision && $0.subject?.uid == user.uid
            }
            #expect(decisions.count == 1 && decisions.first?.details["how"] == "consent")
        }
    }

    @Test func aDenialIsStickyAndNotAskedAgain() throws {
        let setup = try RequestSetup(policy: Self.ask)
        let user = try TestUser("deny")
        let run = try user.onTerminal(["request", "camera"] + setup.socket, answers: [("Answer", "d\n")])
        #expect(run.exit == 3, "\(run.output)")
        #expect(run.output.contains("camera      denied"))
        #expect(try !user.canOpen(setup.camera, .read))
        let denial = try #require(try setup.grants(user).first)
        #expect(denial.decision == .deny && denial.method == .consent && denial.scope == .always)

        // Asked again: answered at once, no prompt, same denial.
        let again = try user.onTerminal(["request", "camera", "--json"] + setup.socket)
        #expect(again.exit == 3)
        #expect(again.prompts == 0, "\(again.output)")
        #expect(again.output.contains(#""outcome" : "already-denied""#), "\(again.output)")
        #expect(again.output.contains("it is not asked again"))
        #expect(try setup.grants(user).count == 1, "nothing new recorded")
    }

    @Test func dismissedOrInterruptedPromptsRecordNothing() throws {
        let setup = try RequestSetup(policy: Self.ask)
        let user = try TestUser("dismiss")
        let arguments = ["request", "camera"] + setup.socket

        let endOfInput = try user.onTerminal(arguments, answers: [("Answer", "\u{4}")])
        #expect(endOfInput.exit == 4, "\(endOfInput.output)")
        #expect(endOfInput.output.contains("no decision: the terminal reached end of input"))
        #expect(endOfInput.output.contains("camera      notDetermined"))

        let interrupted = try user.onTerminal(arguments, answers: [("Answer", "\u{3}")])
        #expect(interrupted.signal == SIGINT, "dies of the signal, as a shell expects: \(interrupted.output)")
        #expect(interrupted.output.contains("no decision: the prompt was interrupted"))

        // Nonsense is asked again, not taken for an answer.
        let retyped = try user.onTerminal(arguments, answers: [("Answer", "maybe\n"), ("Please answer", "\u{4}")])
        #expect(retyped.exit == 4 && retyped.answered == 2, "\(retyped.output)")

        let withoutTerminal = try user.withoutTerminal(arguments)
        #expect(withoutTerminal.status == 1, "\(withoutTerminal.stderr)")
        #expect(withoutTerminal.stderr.contains("cannot ask for consent: this process has no controlling terminal"))
        #expect(withoutTerminal.stderr.contains("no decision: there was no terminal to ask on"))

        #expect(try setup.grants(user).isEmpty, "no decision, and above all no denial")
        #expect(try !user.canOpen(setup.camera, .read))
        let outcomes = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }.compactMap { $0.details["outcome"] }
        #expect(outcomes == ["cancel:end-of-input", "cancel:interrupted", "cancel:end-of-input", "cancel:no-terminal"],
                "\(outcomes)")
        let status = try json(user.devaccess(["status", "camera", "--broker", "--json"] + setup.socket).stdout)
        #expect((status["permissions"] as? [[String: Any]])?.first?["status"] as? String == "notDetermined")

        // Not sticky: the next request asks again, and an answer counts.
        let later = try user.onTerminal(arguments, answers: [("Answer", "o\n")])
        #expect(later.exit == 0 && later.prompts == 1, "\(later.output)")
        #expect(try user.canOpen(setup.camera, .readWrite))
    }

    @Test func anUnansweredPromptTimesOutWithNoDecision() throws {
        let setup = try RequestSetup(policy: Self.ask, promptTimeout: 2)
        let user = try TestUser("late")
        let started = Date()
        let run = try user.onTerminal(["request", "camera"] + setup.socket)
        #expect(run.exit == 4, "\(run.output)")
        #expect(run.output.contains("within 2 s"))
        #expect(run.output.contains("no decision: nobody answered in time"))
        #expect(Date().timeIntervalSince(started) < 15)
        #expect(try setup.grants(user).isEmpty)
        let outcomes = try setup.requestEvents(user).compactMap { $0.details["outcome"] }
        #expect(outcomes.contains("timeout"))
    }

    @Test func authSelfTakesTheRightPasswordAndNeverRecordsAWrongOneAsDenial() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("self")
        let set = try TestProcess.shell("echo '\(user.name):correct horse 42' | chpasswd")
        try #require(set.status == 0, "chpasswd: \(set.stderr)")
        let arguments = ["request", "camera", "--for", "1h"] + setup.socket

        let wrong = try user.onTerminal(arguments, answers: [("Password", "guess one\n"), ("attempt 2", "guess two\n"),
                                                             ("attempt 3", "guess three\n")])
        #expect(wrong.exit == 4, "\(wrong.output)")
        #expect(wrong.answered == 3)
        #expect(wrong.output.contains("no decision: the password was wrong"))
        #expect(!wrong.output.contains("guess"), "typed passwords are not echoed")
        #expect(try setup.grants(user).isEmpty, "a wrong password is no denial")
        #expect(try !user.canOpen(setup.camera, .read))

        let right = try user.onTerminal(arguments, answers: [("Password", "correct horse 42\n")])
        #expect(right.exit == 0, "\(right.output)")
        #expect(!right.output.contains("correct horse"))
        #expect(right.output.contains("confirm with their password"))
        #expect(try user.canOpen(setup.camera, .readWrite))
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.method == .authSelf && grant.decision == .allow && grant.scope == .until)
        let outcomes = try setup.requestEvents(user).compactMap { $0.details["outcome"] }
        #expect(outcomes.filter { $0 == "wrong-password" }.count == 3 && outcomes.contains("accepted"), "\(outcomes)")
        // No password ever reaches the audit trail.
        let trail = try setup.ledger().events().map { $0.detailsJSON }.joined()
        #expect(!trail.contains("guess") && !trail.contains("horse"))
    }

    @Test func policyDenyIsRestrictedAndPolicyAllowGrantsWithoutAPrompt() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=deny\n[microphone]\nDefault=allow\n")
        let user = try TestUser("policy")
        let denied = try user.onTerminal(["request", "camera", "--json"] + setup.socket)
        #expect(denied.exit == 5, "\(denied.output)")
        #expect(denied.prompts == 0)
        #expect(denied.output.contains(#""outcome" : "restricted""#))
        #expect(try setup.grants(user).isEmpty, "a restriction is not the user's denial")

        let allowed = try user.onTerminal(["request", "microphone"] + setup.socket)
        #expect(allowed.exit == 0, "\(allowed.output)")
        #expect(allowed.prompts == 0)
        #expect(try user.canOpen(setup.microphone, .readWrite))
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.method == .policy && grant.decision == .allow)
        #expect(grant.decidedBy.uid == 0, "the broker applied the policy")
        // No scope named and no Keep=: one use.
        #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 300) < 2)
    }

    @Test func severalPermissionsAreAnsweredTogether() throws {
        let setup = try RequestSetup(policy: Self.ask)
        let user = try TestUser("both")
        let run = try user.onTerminal(["request", "camera", "microphone", "--json"] + setup.socket,
                                      answers: [("Answer", "a\n")])
        #expect(run.exit == 0, "\(run.output)")
        #expect(run.prompts == 1, "one prompt for both")
        #expect(run.output.contains("to use the camera and the microphone?"))
        #expect(run.output.contains("Test Camera") && run.output.contains("Test Microphone"))
        #expect(try user.canOpen(setup.camera, .readWrite) && user.canOpen(setup.microphone, .readWrite))
        let grants = try setup.grants(user)
        #expect(Set(grants.map(\.permission)) == [.camera, .microphone])
        #expect(grants.allSatisfy { $0.scope == .always && $0.method == .consent })
    }

    @Test func maxDurationCapsAlwaysAndKeepIsTheDefaultTerm() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\nMaxDuration=1h\n[microphone]\nDefault=allow\nKeep=2h\n")
        let user = try TestUser("cap")
        let always = try user.onTerminal(["request", "camera", "--always"] + setup.socket)
        #expect(always.exit == 0, "\(always.output)")
        let capped = try #require(try setup.grants(user).first { $0.permission == .camera })
        #expect(capped.scope == .until)
        #expect(abs(try #require(capped.expires).timeIntervalSince(capped.created) - 3600) < 2)

        let kept = try user.onTerminal(["request", "microphone"] + setup.socket)
        #expect(kept.exit == 0, "\(kept.output)")
        let keep = try #require(try setup.grants(user).first { $0.permission == .microphone })
        #expect(abs(try #require(keep.expires).timeIntervalSince(keep.created) - 7200) < 2)

        // Asked, MaxDuration takes 'always' off the choices and caps 'for'.
        let asking = try RequestSetup(policy: "[camera]\nDefault=ask\nMaxDuration=30m\n")
        let other = try TestUser("capask")
        let run = try other.onTerminal(["request", "camera", "--for", "8h"] + asking.socket, answers: [("Answer", "f\n")])
        #expect(run.exit == 0, "\(run.output)")
        #expect(!run.output.contains("[a]") && run.output.contains("[f] Allow for 30m"), "\(run.output)")
        let grant = try #require(try asking.grants(other).first)
        #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 1800) < 2)
    }
}
