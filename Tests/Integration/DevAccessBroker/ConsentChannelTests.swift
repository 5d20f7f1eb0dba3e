import Foundation
import Glibc
import Testing
@testable import DevAccessBroker
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// The program that asks never answers: `ask` is put to a person on the login terminal by
/// devaccessd itself, or it becomes a password check; an answer that travels over the
/// requester's own connection (or a terminal the requester controls) decides nothing.
struct ConsentChannelUnitTests {
    @Test func terminalInputIsTrustedOnlyWhenTIOCSTIIsOff() throws {
        let directory = try TemporaryDirectory()
        let setting = directory.path + "/legacy_tiocsti"
        #expect(ConsentChannel.injection(setting: setting)?.contains("no dev.tty.legacy_tiocsti setting") == true)
        try Data("1\n".utf8).write(to: URL(fileURLWithPath: setting))
        #expect(ConsentChannel.injection(setting: setting)?.contains("legacy_tiocsti is 1") == true)
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: setting))
        #expect(ConsentChannel.injection(setting: setting) == nil)
    }

    /// An answer names the grant and ends with the question's code: a program that redraws
    /// the screen could relabel a number, not the meaning of "allow camera always".
    @Test func anAnswerIsTheChoicesWordAndTheQuestionsCode() {
        let choices = [PromptChoice(allow: .once, label: "Allow once"),
                       PromptChoice(allow: .duration(seconds: 3600), label: "Allow for 1h"),
                       PromptChoice(choice: .deny, label: "Deny")]
        let question = ConsentAnswer.Question(permissions: [.camera], choices: choices)
        let answer = { (typed: String) in ConsentAnswer.parse(typed, to: question, code: "417") }
        #expect(answer("allow camera once 417")?.choice.choice == .allow(.once))
        #expect(answer("allow camera for 1h 417")?.choice.choice == .allow(.duration))
        #expect(answer("deny 417")?.choice.choice == .deny)
        #expect(answer("allow camera always 417") == nil, "not offered")
        #expect(answer("1 417") == nil, "no numbers")
        #expect(answer("d 417") == nil, "no letters")
        #expect(answer("allow camera once") == nil, "no code")
        #expect(answer("allow camera once 418") == nil, "another code")
        #expect(answer("allow camera once417") == nil)
        #expect(answer("417") == nil)
        // The old form (a term word and the code) names nothing: no answer.
        #expect(answer("once 417") == nil && answer("for 417") == nil, "the old form")
        // `for` names the length offered, not another one.
        #expect(answer("allow camera for 417") == nil && answer("allow camera for 2h 417") == nil)
        #expect(answer("allow once 417") == nil, "allow names what it allows")
        #expect(answer("deny camera 417") == nil && answer("allow camera camera once 417") == nil)
        #expect(answer("ALLOW Camera ONCE 417")?.permissions == [.camera], "case does not matter")
        #expect(question.answer(choices[1], code: "417") == "allow camera for 1h 417", "the prompt shows what parses")
        #expect(question.answer(choices[2], code: "417") == "deny 417")
    }

    /// A typed subset grants exactly that subset, in the order asked; a permission that was
    /// not asked makes the line no answer (Issue 27 item 2); a denial covers everything asked.
    @Test func anAnswerGrantsExactlyWhatItNamesAndNothingThatWasNotAsked() {
        let choices = [PromptChoice(allow: .always, label: "Allow always"), PromptChoice(choice: .deny, label: "Deny")]
        let question = ConsentAnswer.Question(permissions: [.camera, .microphone], choices: choices)
        let answer = { (typed: String) in ConsentAnswer.parse(typed, to: question, code: "697") }
        #expect(answer("always 697") == nil, "the old form grants nothing")
        #expect(answer("allow camera always 697")?.permissions == [.camera])
        #expect(answer("allow microphone always 697")?.permissions == [.microphone])
        #expect(answer("allow microphone camera always 697")?.permissions == [.camera, .microphone])
        #expect(answer("allow camera microphone location always 697") == nil, "location was not asked")
        #expect(answer("allow location always 697") == nil)
        #expect(answer("deny 697")?.permissions == [.camera, .microphone])
        #expect(answer("allow camera always cheese 697") == nil, "a request's grant names no program")
        // A run's grant is bound to its program: the answer names the program's file.
        var run = question
        run.program = "cheese"
        #expect(ConsentAnswer.parse("allow camera always 697", to: run, code: "697") == nil)
        #expect(ConsentAnswer.parse("allow camera always cheese 697", to: run, code: "697")?.permissions == [.camera])
        #expect(ConsentAnswer.parse("allow camera always totem 697", to: run, code: "697") == nil)
        #expect(run.answer(choices[0], code: "697") == "allow camera microphone always cheese 697")
    }

    /// A location answer may add a coarser level after the term; only the levels offered,
    /// never with deny, never a level the request could not have, only when location is named.
    @Test func aLocationAnswerMayNameACoarserLevel() {
        let choices = [PromptChoice(allow: .once, label: "Allow once"), PromptChoice(choice: .deny, label: "Deny")]
        let levels: [LocationAccuracy] = [.neighborhood, .city, .country]
        let question = ConsentAnswer.Question(permissions: [.camera, .location], choices: choices, levels: levels)
        let answer = { (typed: String) in ConsentAnswer.parse(typed, to: question, code: "417") }
        let city = answer("allow location once city 417")
        #expect(city?.choice.choice == .allow(.once) && city?.level == .city && city?.permissions == [.location])
        #expect(answer("allow location once 417")?.level == nil)
        #expect(answer("allow location once exact 417") == nil, "finer than offered")
        #expect(answer("allow location once street 417") == nil, "not offered")
        #expect(answer("deny city 417") == nil, "deny has no level")
        #expect(answer("allow camera once city 417") == nil, "a level without location")
        var notLocation = question
        notLocation.levels = []
        #expect(ConsentAnswer.parse("allow location once city 417", to: notLocation, code: "417") == nil,
                "not a location prompt")
        #expect(answer("allow location once city") == nil, "no code")
        #expect(answer("allow location once city town 417") == nil)
        #expect(question.answer(choices[0], code: "417", level: .city) == "allow camera location once city 417")
    }

    @Test func terminalDevicesAreNamedFromTheirNumbers() {
        #expect(ConsentChannel.devicePath(major: 136, minor: 3) == "/dev/pts/3")
        #expect(ConsentChannel.devicePath(major: 137, minor: 1) == "/dev/pts/257")
        #expect(ConsentChannel.devicePath(major: 4, minor: 2) == "/dev/tty2")
        #expect(ConsentChannel.devicePath(major: 4, minor: 64) == "/dev/ttyS0")
        #expect(ConsentChannel.devicePath(major: 4, minor: 0) == nil, "tty0 is whichever console is in front")
        #expect(ConsentChannel.devicePath(major: 5, minor: 0) == nil)
        #expect(ConsentChannel.numbers(UInt64((137 << 8) | 1)) == (137, 1))
        #expect(ConsentChannel.kindProblem(major: 4, minor: 64)?.contains("TIOCM_LOOP") == true, "serial: refused")
        #expect(ConsentChannel.kindProblem(major: 136, minor: 0) == nil)
    }

    @Test func requesterTextStaysOnOneLine() {
        let shown = RequestText.question([.camera], term: nil,
                                         user: UserIdentity(uid: 1000, name: "alice", primaryGID: 1000, groups: []),
                                         peer: Peer(pid: 42, uid: 1000, gid: 1000, groups: [], program: "/tmp/x\nfake: y"),
                                         requester: Requester(pid: 42, uid: 1000, program: "/tmp/x\nfake: y"),
                                         devices: [], reason: "call\n  devices: all of them\n" + String(repeating: "z", count: 900))
        #expect(shown.split(separator: "\n").count == 4, "\(shown)")
        #expect(shown.contains("/tmp/x\\nfake: y"))
        #expect(!shown.contains(String(repeating: "z", count: 300)))
    }

    @Test func aRequestersTextCannotDriveTheTerminal() {
        let shown = TerminalPrompt.terminalText("call\u{1B}[2J now\u{202E}gpj.exe\nnext")
        #expect(!shown.contains("\u{1B}"))
        #expect(!shown.contains("\u{202E}"))
        #expect(shown.contains("\\x1B[2J"))
        #expect(shown.contains("\r\nnext"))
    }
}

@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct ForgedConsentTests {
    /// Speaks the protocol as the user: asks for the camera, and answers every prompt
    /// itself with "always" (the attack of issue 10). Prints the kinds of prompts it saw
    /// and the final reply.
    static let selfAnswering = """
        import socket, sys, json
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        f = s.makefile("rwb")
        def send(m):
            f.write(json.dumps(m).encode() + b"\\n"); f.flush()
        send({"version": 1, "id": 1, "type": "request", "permissions": ["camera"], "scope": "always"})
        kinds, final = [], None
        while True:
            line = f.readline()
            if not line: break
            r = json.loads(line)
            if r["type"] == "prompt":
                kinds.append(r["kind"])
                send({"version": 1, "id": 1, "type": "prompt-answer", "prompt": r["prompt"], "answer": "always"})
                continue
            final = r
            break
        print(json.dumps({"kinds": kinds, "final": final}))
        """

    @Test func aProgramAnsweringItsOwnPromptGetsNoGrant() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let mallory = try TestUser("selfans")
        let run = try mallory.python(Self.selfAnswering, [setup.daemon.socketPath])
        #expect(run.status == 0, "\(run.stderr)")
        let document = try json(run.stdout)
        // No consent question travels to the requester: only a password can stand in for a person.
        #expect((document["kinds"] as? [String]) == ["password"], "\(run.stdout)")
        #expect(try setup.grants(mallory).isEmpty, "\(run.stdout)")
        #expect(try !mallory.canOpen(setup.camera, .read))
        let prompts = try setup.requestEvents(mallory).filter { $0.details["stage"] == "prompt" }
        #expect(prompts.contains { $0.details["outcome"] == "no-channel" && $0.details["kind"] == "ask" },
                "\(prompts.map(\.details))")
        // The audit names what really asked: the program and what started it.
        let received = try #require(try setup.requestEvents(mallory).first { $0.details["stage"] == "received" })
        #expect(received.program?.hasSuffix("python3.11") == true || received.program?.contains("python") == true,
                "\(String(describing: received.program))")
        #expect(received.details["started_by"]?.contains("devaccessPackageTests.xctest") == true, "\(received.details)")
    }

    /// `script` gives the CLI a terminal the user's own program controls; typing into it
    /// is the requester answering itself.
    @Test func theCLIDrivenThroughScriptGetsNoGrant() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n", promptTimeout: 5)
        let mallory = try TestUser("scripted")
        let command = "(sleep 2; printf 'a\\n'; sleep 1; printf '3\\n'; sleep 1; printf 'always\\n') | "
            + "script -qec '\(TestProcess.devaccessBinary) request camera --always --socket \(setup.daemon.socketPath)' "
            + "/dev/null"
        let run = try mallory.run("/bin/sh", ["-c", command])
        #expect(!run.stdout.contains("allowed"), "\(run.stdout)")
        #expect(try setup.grants(mallory).isEmpty, "\(run.stdout) \(run.stderr)")
        #expect(try !mallory.canOpen(setup.camera, .read))
        // It did reach the broker, which put no consent question to it.
        let asks = try setup.requestEvents(mallory).filter { $0.details["stage"] == "prompt" && $0.details["kind"] == "ask" }
        #expect(!asks.isEmpty && asks.allSatisfy { $0.details["outcome"] == "no-channel" }, "\(asks.map(\.details))")
    }
}
