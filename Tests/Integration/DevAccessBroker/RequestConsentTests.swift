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

    /// Outside a login session (these test users have none) `ask` is a password check,
    /// and without a terminal to type it on, nothing is decided.
    @Test func askWithoutALoginTerminalIsAPasswordCheckAndNeverAYesFromTheRequester() throws {
        let setup = try RequestSetup(policy: Self.ask)
        let user = try TestUser("nolgn")
        let arguments = ["request", "camera"] + setup.socket
        let asked = try user.onTerminal(arguments, answers: [("Password", "\u{4}")])
        #expect(asked.exit == 4, "\(asked.output)")
        #expect(asked.output.contains("cannot ask you where only you can answer"), "\(asked.output)")
        #expect(asked.output.contains("not in a login session"), "\(asked.output)")
        #expect(!asked.output.contains("Allow once"), "no consent question reaches the requester")
        let withoutTerminal = try user.withoutTerminal(arguments)
        // 77: no terminal to ask on, as for `run` (issue 31; it was 1).
        #expect(withoutTerminal.status == 77, "\(withoutTerminal.stderr)")
        #expect(withoutTerminal.stderr.contains("no decision: there was no terminal to ask on"), "\(withoutTerminal.stderr)")
        #expect(try setup.grants(user).isEmpty, "no decision, and above all no denial")
        #expect(try !user.canOpen(setup.camera, .read))
        let prompts = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
        #expect(prompts.filter { $0.details["kind"] == "ask" }.allSatisfy { $0.details["outcome"] == "no-channel" })
    }

    @Test func authSelfTakesTheRightPasswordAndNeverRecordsAWrongOneAsDenial() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("self")
        try user.setPassword("correct horse 42")
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
        // Three wrong passwords a moment ago: the prompt says the check waits, and it still passes.
        #expect(right.output.contains("After 3 wrong passwords devaccessd checks the next one no sooner than in"),
                "\(right.output)")
        #expect(try user.canOpen(setup.camera, .readWrite))
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.method == .authSelf && grant.decision == .allow && grant.scope == .duration)
        let outcomes = try setup.requestEvents(user).compactMap { $0.details["outcome"] }
        #expect(outcomes.filter { $0 == "wrong-password" }.count == 3 && outcomes.contains("accepted"), "\(outcomes)")
        // No password ever reaches the audit trail.
        let trail = try setup.ledger().events().map { $0.detailsJSON }.joined()
        #expect(!trail.contains("guess") && !trail.contains("horse"))
    }

    /// Issue 31: a wrong password asks again below the question, which stays on the screen:
    /// the retry shows which attempt it is, the wait and the password line, never the whole
    /// question again.
    @Test func aRetryAfterAWrongPasswordShowsOnlyTheShortLineNotTheQuestion() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("retry")
        try user.setPassword("correct horse 42")
        let run = try user.onTerminal(["request", "camera", "--for", "1h"] + setup.socket,
                                      answers: [("Password", "guess one\n"), ("attempt 2", "correct horse 42\n")])
        #expect(run.exit == 0, "\(run.output)")
        #expect(run.output.contains("(the last one was wrong; attempt 2 of 3)"), "\(run.output)")
        #expect(run.output.components(separatedBy: "requested by:").count == 2, "the question once: \(run.output)")
        #expect(run.output.components(separatedBy: "Password for \(user.name)").count == 3, "\(run.output)")
        #expect(try user.canOpen(setup.camera, .readWrite))
    }

    /// Issue 31: a password the back-off makes wait is not checked in silence: "checking..."
    /// follows it on the same terminal at once, before devaccessd's verdict.
    @Test func aTypedPasswordSaysItIsBeingCheckedBeforeTheVerdict() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("chkng")
        try user.setPassword("correct horse 42")
        let run = try user.onTerminal(["request", "camera", "--for", "1h"] + setup.socket,
                                      answers: [("Password", "guess one\n"), ("attempt 2", "correct horse 42\n")])
        #expect(run.exit == 0, "\(run.output)")
        // Each typed password: "checking..." right after the prompt, before the next prompt or the answer.
        let first = try #require(run.output.range(of: "checking..."), "\(run.output)")
        let retry = try #require(run.output.range(of: "attempt 2 of 3"), "\(run.output)")
        #expect(first.lowerBound < retry.lowerBound, "\(run.output)")
        let second = try #require(run.output.range(of: "checking...", range: retry.upperBound..<run.output.endIndex),
                                  "the delayed check (after a wrong password) says so too: \(run.output)")
        let verdict = try #require(run.output.range(of: "camera      authorized"), "\(run.output)")
        #expect(second.lowerBound < verdict.lowerBound, "\(run.output)")
    }

    /// Issue 27 item 10: Enter alone at the password prompt is no decision, not a wrong
    /// password: no PAM check (pam_faillock counts nothing), no back-off for the next
    /// request, and the prompt says how to dismiss it.
    @Test func anEmptyPasswordIsNoDecisionNotAWrongPassword() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n", promptTimeout: 4)
        let user = try TestUser("empty")
        try user.setPassword("correct horse 42")
        let arguments = ["request", "camera", "--for", "1h"] + setup.socket
        let empty = try user.onTerminal(arguments, answers: [("Password", "\n")])
        #expect(empty.exit == 4, "\(empty.output)")
        #expect(empty.output.contains("Enter alone: no decision"), "the prompt says how to dismiss it: \(empty.output)")
        #expect(empty.output.contains("no decision: the prompt was dismissed"), "\(empty.output)")
        #expect(!empty.output.contains("attempt 2"), "not asked again as after a wrong password: \(empty.output)")
        let outcomes = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
            .compactMap { $0.details["outcome"] }
        #expect(outcomes == ["cancel:dismissed"], "\(outcomes)")
        let tally = try TestProcess.run("/usr/sbin/faillock", ["--user", user.name])
        let failures = tally.stdout.split(separator: "\n").filter { $0.range(of: #"^\d{4}-\d\d-\d\d"#, options: .regularExpression) != nil }
        #expect(failures.isEmpty, "PAM saw a password: \(tally.stdout)")
        // No back-off: the next request's prompt has no wait to announce, and the right password passes.
        let right = try user.onTerminal(arguments, answers: [("Password", "correct horse 42\n")])
        #expect(right.exit == 0, "\(right.output)")
        #expect(!right.output.contains("wrong password"), "\(right.output)")
        #expect(try setup.grants(user).count == 1)
    }

    /// A request is audited before anything is asked: with the ledger unwritable (its WAL
    /// made immutable, as a full disk would), no password prompt is shown and no password
    /// reaches PAM unrecorded; the request fails saying the ledger is the problem.
    @Test func nothingIsAskedWhenTheRequestCannotBeAudited() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("noaudit")
        let wal = setup.stateDirectory + "/ledger.db-wal"
        try #require(try TestProcess.run("/usr/bin/chattr", ["+i", wal]).status == 0)
        defer { _ = try? TestProcess.run("/usr/bin/chattr", ["-i", wal]) }
        let asked = try user.onTerminal(["request", "camera"] + setup.socket, answers: [("Password", "anything\n")])
        #expect(asked.answered == 0 && asked.prompts == 0, "a prompt was shown unaudited: \(asked.output)")
        #expect(asked.output.contains("ledger"), "\(asked.output)")
        #expect(asked.exit != 0)
        #expect(try !user.canOpen(setup.camera, .read))
    }

    @Test func policyDenyIsRestrictedAndPolicyAllowGrantsWithoutAPrompt() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=deny\n[microphone]\nDefault=allow\n")
        let user = try TestUser("policy")
        let denied = try user.onTerminal(["request", "camera", "--json"] + setup.socket)
        #expect(denied.exit == 5, "\(denied.output)")
        #expect(denied.prompts == 0)
        #expect(denied.output.contains(#""outcome": "restricted""#))
        #expect(try setup.grants(user).isEmpty, "a restriction is not the user's denial")

        let allowed = try user.onTerminal(["request", "microphone"] + setup.socket)
        #expect(allowed.exit == 0, "\(allowed.output)")
        #expect(allowed.prompts == 0)
        #expect(allowed.output.contains("microphone  authorized"), "\(allowed.output)")
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.method == .policy && grant.decision == .allow)
        #expect(grant.decidedBy.uid == 0, "the broker applied the policy")
        // No scope named and no Keep=: once, while the program that ran the CLI (here the
        // pty driver, which has exited since) ran.
        #expect(grant.scope == .once && grant.expires == nil && grant.holder != nil)
        #expect(try within(2) { try setup.grants(user).first?.revoked != nil } != nil)
        #expect(try !user.canOpen(setup.microphone, .read))
    }

    /// A request's allow goes the engine's one decide path: a user-wide allow replaces the
    /// user's user-wide allows and leaves an administrator's program grant, as an
    /// administrator's user-wide grant does (the broker's own copy of that path ended it).
    @Test func aRequestsAllowLeavesTheUsersProgramGrants() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("keepprog")
        let program = try TestProcess.devaccess(["grant", "camera", "--user", user.name, "--program", "/bin/sh"]
            + setup.socket, environment: ["DEVACCESS_TEST_DEVICES": setup.devices])
        #expect(program.status == 0, "\(program.stderr)")
        let first = try user.onTerminal(["request", "camera", "--for", "1h"] + setup.socket)
        #expect(first.exit == 0, "\(first.output)")
        let second = try user.onTerminal(["request", "camera", "--always"] + setup.socket)
        #expect(second.exit == 0, "\(second.output)")
        let grants = try setup.grants(user)
        let standing = grants.filter { $0.revoked == nil }
        #expect(standing.count == 2, "\(grants)")
        #expect(standing.contains { $0.program != nil && $0.method == .admin }, "the program grant stands: \(grants)")
        #expect(standing.contains { $0.program == nil && $0.scope == .always && $0.method == .policy })
        #expect(grants.filter { $0.revoked != nil }.map(\.scope) == [.duration], "the 1h grant was replaced")
        #expect(try user.canOpen(setup.camera, .readWrite))
    }

    @Test func maxDurationCapsAlwaysAndKeepIsTheDefaultTerm() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\nMaxDuration=1h\n[microphone]\nDefault=allow\nKeep=2h\n")
        let user = try TestUser("cap")
        let always = try user.onTerminal(["request", "camera", "--always"] + setup.socket)
        #expect(always.exit == 0, "\(always.output)")
        let capped = try #require(try setup.grants(user).first { $0.permission == .camera })
        #expect(capped.scope == .duration)
        #expect(abs(try #require(capped.expires).timeIntervalSince(capped.created) - 3600) < 2)

        let kept = try user.onTerminal(["request", "microphone"] + setup.socket)
        #expect(kept.exit == 0, "\(kept.output)")
        let keep = try #require(try setup.grants(user).first { $0.permission == .microphone })
        #expect(abs(try #require(keep.expires).timeIntervalSince(keep.created) - 7200) < 2)
    }
}

extension LoginSessions {
    /// `ask` put to a person on their login terminal by devaccessd itself: the way `login`
    /// makes one (root on a pty, `login -f`, utmp, pam_loginuid), with TIOCSTI off. The CLI
    /// runs in that session; the answer is typed on the terminal, and never travels over
    /// the requester's connection.
    @Suite
    struct ConsentAtTheLoginTerminalTests {
        static let ask = "[camera]\nDefault=ask\n[microphone]\nDefault=ask\n"
        static let question = "within"

        static func request(_ user: TestUser, _ setup: RequestSetup, _ extra: [String] = [],
                            answers: [(expect: String, type: String)] = []) throws -> LoginRun {
            try LoginTerminal.run(user: user, command: [TestProcess.devaccessBinary, "request"] + extra + setup.socket,
                                  answers: answers, timeout: 90)
        }

        /// Runs a python program as `user` in a login session (from a file: the harness types
        /// one line, and a program of several lines does not fit in it).
        static func python(_ source: String, as user: TestUser, _ arguments: [String],
                           answers: [(expect: String, type: String)] = []) throws -> LoginRun {
            let scratch = try TemporaryDirectory()
            let script = scratch.path + "/program.py"
            try Data(source.utf8).write(to: URL(fileURLWithPath: script))
            return try LoginTerminal.run(user: user, command: ["/usr/bin/python3", script] + arguments, answers: answers,
                                         timeout: 60)
        }

        @Test func aPersonAtTheLoginTerminalAllowsOnceForAnHourOrAlways() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask)
            let users = try ["o", "f", "a"].map { try TestUser("lask\($0)", shell: "/bin/sh") }
            for (user, (key, seconds)) in zip(users, [("allow camera once {code}", Int64?.some(0)),
                                                      ("allow camera for 1h {code}", 3600),
                                                      ("allow camera always {code}", nil)]) {
                #expect(try !user.canOpen(setup.camera, .readWrite))
                let run = try Self.request(user, setup, ["camera", "--reason", "video call"],
                                           answers: [(Self.question, "\(key)\n")])
                #expect(run.exitStatus == 0, "\(run.output)")
                // devaccessd's question, on the terminal: what, which devices, who started it, why.
                #expect(run.output.contains("to use the camera?"), "\(run.output)")
                #expect(run.output.contains("Test Camera [camera:test-video-index0]"))
                #expect(run.output.contains("requested by: \(user.name) (uid \(user.uid))"))
                #expect(run.output.contains("started by: "), "\(run.output)")
                #expect(run.output.contains("reason: video call"))
                #expect(run.output.contains("camera      authorized"), "the new status is printed")
                if seconds == 0 {
                    // Once: while the login shell that ran the CLI ran; the session has ended.
                    // Issue 31: the CLI's parent is the login shell: "once" read as a single use.
                    #expect(run.output.contains("Allow until you close this shell, /usr/bin/dash (pid "),
                            "\(run.output)")
                    #expect(!run.output.contains("Allow once"), "\(run.output)")
                    #expect(try within(2) { try !user.canOpen(setup.camera, .read) } != nil)
                } else {
                    #expect(try user.canOpen(setup.camera, .readWrite), "the kernel lets \(user.name) in")
                }
                #expect(try !user.canOpen(setup.microphone, .read), "and only into what was asked for")
                let grants = try setup.grants(user)
                try #require(grants.count == 1)
                let grant = grants[0]
                #expect(grant.decision == .allow && grant.method == .consent && grant.permission == .camera)
                #expect(grant.decidedBy == Principal(uid: user.uid, name: user.name))
                if seconds == 0 {
                    #expect(grant.scope == .once && grant.expires == nil && grant.holder != nil)
                    #expect(try setup.ledger().events().map(\.event).contains {
                        $0.type == .expiry && $0.subject?.uid == user.uid && $0.details["ended_by"] == "process-exit"
                    })
                } else if let seconds {
                    let length = try #require(grant.expires).timeIntervalSince(grant.created)
                    #expect(abs(length - Double(seconds)) < 2, "\(key): \(length)")
                } else {
                    #expect(grant.scope == .always && grant.expires == nil)
                }
                let prompt = try #require(try setup.requestEvents(user).first { $0.details["stage"] == "prompt" })
                #expect(prompt.details["channel"]?.contains("login pid") == true, "\(prompt.details)")
                #expect(prompt.details["channel"]?.contains(run.tty ?? "?") == true, "\(prompt.details)")
            }
        }

        @Test func aDenialIsStickyAndNotAskedAgain() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask)
            let user = try TestUser("ldeny", shell: "/bin/sh")
            let run = try Self.request(user, setup, ["camera"], answers: [(Self.question, "deny {code}\n")])
            #expect(run.exitStatus == 3, "\(run.output)")
            #expect(run.output.contains("camera      denied"))
            let denial = try #require(try setup.grants(user).first)
            #expect(denial.decision == .deny && denial.method == .consent && denial.scope == .always)
            let again = try Self.request(user, setup, ["camera", "--json"])
            #expect(again.exitStatus == 3, "\(again.output)")
            #expect(!again.output.contains("the code"), "not asked again: \(again.output)")
            #expect(again.output.contains(#""outcome": "already-denied""#), "\(again.output)")
            #expect(try setup.grants(user).count == 1, "nothing new recorded")
        }

        @Test func endOfInputInterruptionNonsenseAndSilenceRecordNothing() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 3)
            let user = try TestUser("ldism", shell: "/bin/sh")

            let endOfInput = try Self.request(user, setup, ["camera"], answers: [(Self.question, "\u{4}")])
            #expect(endOfInput.exitStatus == 4, "\(endOfInput.output)")
            #expect(endOfInput.output.contains("no decision: the terminal reached end of input"), "\(endOfInput.output)")

            let interrupted = try Self.request(user, setup, ["camera"], answers: [(Self.question, "\u{3}")])
            #expect(interrupted.exitStatus == 130, "dies of SIGINT: \(interrupted.output)")
            #expect(interrupted.output.contains("the request was withdrawn"), "\(interrupted.output)")

            // Nonsense, and a right choice without the code, are not answers (and are not echoed).
            let retyped = try Self.request(user, setup, ["camera"],
                                           answers: [(Self.question, "maybe\n"), ("not an answer", "1\n"),
                                                     ("not an answer", "\n")])
            #expect(retyped.exitStatus == 4 && retyped.answered == 3, "\(retyped.output)")
            #expect(!retyped.output.contains("'maybe'"), "\(retyped.output)")
            #expect(retyped.output.contains("no decision: the prompt was dismissed"), "\(retyped.output)")

            let started = Date()
            let silent = try Self.request(user, setup, ["camera"])
            #expect(silent.exitStatus == 4, "\(silent.output)")
            #expect(silent.output.contains("no decision: nobody answered in time"), "\(silent.output)")
            #expect(Date().timeIntervalSince(started) < 30)

            #expect(try setup.grants(user).isEmpty, "no decision, and above all no denial")
            #expect(try !user.canOpen(setup.camera, .read))
            let outcomes = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
                .compactMap { $0.details["outcome"] }
            #expect(outcomes == ["cancel:end-of-input", "client-closed", "cancel:dismissed", "timeout"], "\(outcomes)")
        }

        @Test func severalPermissionsAreAnsweredTogetherAndMaxDurationCapsTheChoices() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask)
            let user = try TestUser("lboth", shell: "/bin/sh")
            let run = try Self.request(user, setup, ["camera", "microphone"],
                                       answers: [(Self.question, "allow camera microphone always {code}\n")])
            #expect(run.exitStatus == 0, "\(run.output)")
            #expect(run.output.contains("to use the camera and the microphone?"))
            #expect(try user.canOpen(setup.camera, .readWrite) && user.canOpen(setup.microphone, .readWrite))
            let grants = try setup.grants(user)
            #expect(Set(grants.map(\.permission)) == [.camera, .microphone])
            #expect(grants.allSatisfy { $0.scope == .always && $0.method == .consent })

            // MaxDuration takes 'always' off the choices and caps 'for'.
            let capped = try RequestSetup(policy: "[camera]\nDefault=ask\nMaxDuration=30m\n")
            let other = try TestUser("lcap", shell: "/bin/sh")
            let asked = try Self.request(other, capped, ["camera", "--for", "8h"],
                                         answers: [(Self.question, "allow camera for 30m {code}\n")])
            #expect(asked.exitStatus == 0, "\(asked.output)")
            #expect(!asked.output.contains("Allow always") && asked.output.contains("Allow for 30m"), "\(asked.output)")
            // The choice says when it would end, in local time (HumanTime).
            #expect(asked.output.range(of: #"Allow for 30m \(the longest the policy allows\), until [^\r\n]*\d\d:\d\d"#,
                                       options: .regularExpression) != nil, "\(asked.output)")
            let grant = try #require(try capped.grants(other).first)
            #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 1800) < 2)
        }

        /// Hostile review L2: the policy allows the camera and asks about the microphone; while
        /// the person reads the question, the policy changes to forbid the camera; the person
        /// denies the microphone. The denial is recorded and holds; only the camera's allow,
        /// forbidden by then, is refused, and the reply says so per permission.
        @Test func aDenialHoldsWhenTheAllowBesideItIsForbiddenMeanwhile() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n[microphone]\nDefault=ask\n")
            let user = try TestUser("lforb", shell: "/bin/sh")
            let change = "printf '[camera]\\nDefault=deny\\n[microphone]\\nDefault=ask\\n' > "
                + "'\(setup.config.path)/devaccess.conf'"
            let run = try Self.request(user, setup, ["camera", "microphone"],
                                       answers: [(Self.question, "{shell:\(change):shell}deny {code}\n")])
            #expect(run.output.contains("to use the microphone?"), "\(run.output)")
            let grants = try setup.grants(user)
            #expect(grants.count == 1, "\(grants)")
            let denial = try #require(grants.first)
            #expect(denial.permission == .microphone && denial.decision == .deny && denial.method == .consent)
            #expect(try !user.canOpen(setup.camera, .read) && !user.canOpen(setup.microphone, .read))
            #expect(run.output.contains("the policy changed while this request was decided"), "\(run.output)")
            let answered = try setup.requestEvents(user).filter { $0.details["stage"] == "answered" }
            #expect(answered.contains { $0.permission == .camera && $0.details["outcome"] == "restricted" },
                    "\(answered.map(\.details))")
        }

        /// The attacks of issue 10 from inside the session: a program whose controlling
        /// terminal IS the login terminal speaks the protocol, answers on its connection and
        /// writes the answer to the terminal (output, not input): no grant. With TIOCSTI
        /// allowed, the terminal is not trusted at all and `ask` is a password check.
        @Test func aProgramInTheSessionCannotAnswerAndTIOCSTIMakesTheTerminalUntrusted() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 3)
            let mallory = try TestUser("lforge", shell: "/bin/sh")
            let forger = #"""
                import socket, sys, json, os, time
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1])
                f = s.makefile("rwb")
                f.write(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"], "scope": "always"}).encode() + b"\n"); f.flush()
                time.sleep(0.5)
                tty = os.open("/dev/tty", os.O_WRONLY)
                os.write(tty, b"always\n1\n")
                f.write(json.dumps({"version": 1, "id": 1, "type": "prompt-answer", "prompt": 1, "answer": "always"}).encode() + b"\n"); f.flush()
                print(f.readline().decode().strip()[:300])
                """#
            let forged = try Self.python(forger, as: mallory, [setup.daemon.socketPath])
            #expect(try setup.grants(mallory).isEmpty, "\(forged.output)")
            #expect(try !mallory.canOpen(setup.camera, .read))
            let outcomes = try setup.requestEvents(mallory).filter { $0.details["stage"] == "prompt" }
                .compactMap { $0.details["outcome"] }
            #expect(outcomes == ["timeout"], "\(outcomes) \(forged.output)")
            settings.restore()

            // TIOCSTI allowed: no terminal consent, even at the login terminal.
            let open = try TerminalSettings(legacyTIOCSTI: 1)
            defer { open.restore() }
            let user = try TestUser("ltiocsti", shell: "/bin/sh")
            let run = try Self.request(user, setup, ["camera"], answers: [("Password", "\u{4}")])
            #expect(run.output.contains("legacy_tiocsti is 1"), "\(run.output)")
            #expect(!run.output.contains("the code"), "\(run.output)")
            #expect(try setup.grants(user).isEmpty)
        }

        /// A pseudo-terminal of the user's own inside the login session (`script`): the
        /// requester is not on the login's terminal, so nothing is asked there, whatever
        /// utmp says (a line in it can be forged with utempter).
        @Test func aRequesterOnAPseudoTerminalOfItsOwnIsNotAskedOnTheLoginTerminal() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 3)
            let mallory = try TestUser("lscript", shell: "/bin/sh")
            let inner = "\(TestProcess.devaccessBinary) request camera --always --socket \(setup.daemon.socketPath)"
            let run = try LoginTerminal.run(user: mallory, command: ["/usr/bin/script", "-qec", inner, "/dev/null"],
                                            answers: [("Password", "\u{4}")], timeout: 60)
            #expect(run.output.contains("does not run on the terminal of a login"), "\(run.output)")
            #expect(!run.output.contains("the code"), "\(run.output)")
            #expect(try setup.grants(mallory).isEmpty)
            #expect(try !mallory.canOpen(setup.camera, .read))
        }

        /// A program of the session makes a terminal of its own (a new session on a pty it
        /// holds, as a hijacked login shell could), runs the CLI there and answers through
        /// the master side, where it can read everything the question shows, code included:
        /// the session is not led by root's login, so nothing is asked there.
        @Test func aPseudoTerminalTheRequesterHoldsIsNeverAskedOn() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 4)
            let mallory = try TestUser("lmaster", shell: "/bin/sh")
            let driver = #"""
                import os, pty, re, sys, time
                pid, fd = pty.fork()
                if pid == 0:
                    os.execv(sys.argv[1], [sys.argv[1], "request", "camera", "--always", "--socket", sys.argv[2]])
                out = b""; deadline = time.time() + 20; answered = False
                while time.time() < deadline:
                    try:
                        data = os.read(fd, 4096)
                    except OSError:
                        break
                    if not data:
                        break
                    out += data
                    code = re.search(rb"the code (\d+)", out)
                    if code and not answered:
                        os.write(fd, b"always " + code.group(1) + b"\n"); answered = True
                    if b"Password" in out and not answered:
                        os.write(fd, b"\x04"); answered = True
                os.waitpid(pid, 0)
                sys.stdout.write(out.decode("utf-8", "replace"))
                """#
            let run = try Self.python(driver, as: mallory, [TestProcess.devaccessBinary, setup.daemon.socketPath])
            #expect(run.output.contains("does not run on the terminal of a login made by root's login"), "\(run.output)")
            #expect(!run.output.contains("the code"), "\(run.output)")
            let asks = try setup.requestEvents(mallory).filter { $0.details["stage"] == "prompt" && $0.details["kind"] == "ask" }
            #expect(asks.map { $0.details["outcome"] } == ["no-channel"], "\(asks.map(\.details))")
            #expect(try setup.grants(mallory).isEmpty, "\(run.output)")
            #expect(try !mallory.canOpen(setup.camera, .read))
        }

        /// The requester forks a helper that, once devaccessd's question is on the screen,
        /// moves the cursor up and rewrites the question's lines (keeping the line with the
        /// code) to say what the person should type; before asking it hid its own output
        /// (SGR conceal) and set a scrolling region. Issue 27 item 2.
        static let redrawer = #"""
            import os, sys, time
            tell = sys.argv[3].encode()
            os.write(1, b"\x1b[8m\x1b[3;5r")
            if os.fork() == 0:
                time.sleep(1.5)
                tty = os.open("/dev/tty", os.O_WRONLY)
                fake = [b"Allow /usr/bin/cheese to use the camera?", b"  reason: video call", tell]
                out = b"\x1b7\x1b[14A\r"
                for line in fake + [b""] * 11:
                    out += b"\x1b[2K" + line + b"\r\n"
                os.write(tty, out + b"\x1b8")
                os._exit(0)
            os.execv(sys.argv[1], [sys.argv[1], "request", "camera", "microphone", "--always", "--reason", "video call",
                                   "--socket", sys.argv[2]])
            """#

        /// A person types what a redrawn screen tells them, in the old answer form (`always
        /// CODE`): that is no answer any more, so nothing is granted; and the terminal's
        /// rendering state is reset before the question, so earlier output cannot hide it.
        @Test func aRedrawnQuestionAnsweredInTheOldFormGrantsNothing() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 4)
            let mallory = try TestUser("lredraw", shell: "/bin/sh")
            let run = try Self.python(Self.redrawer, as: mallory,
                [TestProcess.devaccessBinary, setup.daemon.socketPath, "REDRAWN: to allow, type always and the code"],
                answers: [("REDRAWN: to allow", "always {code}\n")])
            #expect(run.output.contains("the code"), "the real question was shown: \(run.output)")
            #expect(run.answered == 1, "\(run.output)")
            #expect(try setup.grants(mallory).isEmpty, "\(run.output)")
            #expect(try !mallory.canOpen(setup.camera, .read) && !mallory.canOpen(setup.microphone, .read))
            // The question comes after a reset of what the requester set: SGR, scrolling region, cursor.
            let output = run.output
            let hidden = try #require(output.range(of: "\u{1b}[8m"))
            let question = try #require(output.range(of: "to use the camera and the microphone?"))
            for reset in ["\u{1b}[0m", "\u{1b}[r", "\u{1b}[?25h", "\u{1b}[?1049l"] {
                let found = output.range(of: reset, range: hidden.upperBound..<question.lowerBound)
                #expect(found != nil, "no \(reset.debugDescription) before the question: \(output.debugDescription)")
            }
        }

        /// The redrawn screen asks for less than the request did: the person types
        /// `allow camera always CODE` and gets exactly the camera; a word that was not asked
        /// (location) makes the answer no answer.
        @Test func aTypedSubsetGrantsExactlyThatSubset() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 6)
            let user = try TestUser("lsubset", shell: "/bin/sh")
            let run = try Self.python(Self.redrawer, as: user,
                [TestProcess.devaccessBinary, setup.daemon.socketPath, "REDRAWN: type allow camera always and the code"],
                answers: [("REDRAWN: type", "allow camera microphone location always {code}\n"),
                          ("not an answer", "allow camera always {code}\n")])
            #expect(run.answered == 2, "\(run.output)")
            let grants = try setup.grants(user)
            #expect(grants.map(\.permission) == [.camera], "\(grants) \(run.output)")
            #expect(grants.allSatisfy { $0.decision == .allow && $0.scope == .always && $0.method == .consent })
            #expect(try user.canOpen(setup.camera, .readWrite) && !user.canOpen(setup.microphone, .read))
            #expect(run.output.contains("the answer typed did not name microphone"), "\(run.output)")
            let prompt = try #require(try setup.requestEvents(user).first { $0.details["stage"] == "prompt" })
            #expect(prompt.details["outcome"] == "always" && prompt.details["named"] == "camera", "\(prompt.details)")
        }

        /// The requester, foreground on the login terminal, stops the terminal's output to
        /// hide the real question and shows its own ("type 3"): the broker turns output back
        /// on, and an answer without the question's code is no answer.
        @Test func aHiddenQuestionCannotBeAnsweredWithoutItsCode() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: Self.ask, promptTimeout: 4)
            let mallory = try TestUser("lhide", shell: "/bin/sh")
            let hider = #"""
                import socket, sys, json, os, termios, time
                termios.tcflow(0, termios.TCOOFF)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sys.argv[1])
                f = s.makefile("rwb")
                f.write(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"], "scope": "always"}).encode() + b"\n"); f.flush()
                time.sleep(1)
                termios.tcflow(0, termios.TCOON)
                os.write(1, b"\nAccept the license? type 3 then Enter: ")
                print(f.readline().decode().strip()[:200])
                """#
            let run = try Self.python(hider, as: mallory, [setup.daemon.socketPath],
                                      answers: [("type 3 then Enter: ", "3\n")])
            #expect(run.output.contains("the code"), "the real question was shown: \(run.output)")
            #expect(try setup.grants(mallory).isEmpty, "\(run.output)")
            // Asked on the terminal, and "3" without the code decided nothing.
            let asked = try setup.requestEvents(mallory).filter { $0.details["stage"] == "prompt" }
            #expect(asked.map { $0.details["outcome"] } == ["timeout"], "\(asked.map(\.details))")
            #expect(asked.first?.details["channel"] != nil)
            #expect(try !mallory.canOpen(setup.camera, .read))
        }
    }
}
