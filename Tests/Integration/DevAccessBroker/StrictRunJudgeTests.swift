import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport

/// Hostile review round 3, finding 1 (issue 27): `devaccess run --camera --strict` keeps its
/// program off the microphone's node (Landlock), but the program could ask devaccessd to
/// open the microphone (its user reaches it through group audio) or start a nested
/// `devaccess run --microphone`, which ran with the user's plain groups and no Landlock.
/// devaccessd knows a peer in a run by the run's group id among the kernel's
/// `SO_PEERGROUPS` and judges it as that run (`Caller.judged`, DevAccessEngine).
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct StrictRunJudgeTests {
    static let microphoneID = "microphone:test-card0"

    /// A user who reaches the microphone at large: its group `audio` opens the node
    /// (root:audio 0660, as on a stock desktop) and a user-wide grant lets devaccessd open
    /// it for them. A strict camera run of theirs must get neither.
    static func userWithAudio(_ name: String, _ setup: RequestSetup) throws -> (TestUser, TestGroup) {
        let user = try TestUser(name)
        let audio = try TestGroup(name + "a", members: [user])
        #expect(chown(setup.microphone, 0, audio.gid) == 0 && chmod(setup.microphone, 0o660) == 0)
        let granted = try TestProcess.devaccess(["grant", "microphone", "--user", user.name] + setup.socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        return (user, audio)
    }

    /// The library probe asking devaccessd to open the microphone, as a run's program.
    static func probeOpen(_ setup: RequestSetup) -> [String] {
        ["/usr/bin/env", "DEVACCESS_SOCKET=\(setup.daemon.socketPath)", LibraryProbe.binary, "open", "microphone",
         microphoneID]
    }

    static func lastJSON(_ output: Data) -> [String: Any] {
        let text = String(decoding: output, as: UTF8.self)
        guard let line = text.split(separator: "\n").last, let document = try? json(String(line)) else { return [:] }
        return document
    }

    @Test func aStrictRunCannotHaveDevaccessdOpenTheMicrophoneItWasNotGiven() throws {
        let setup = try RunTests.setup()
        let (user, _) = try Self.userWithAudio("sjopen", setup)
        // Without --strict the program is its user's: devaccessd opens what the user reaches
        // (else this test would prove nothing).
        let loose = try RunTests.run(user, setup, ["--camera", "--"] + Self.probeOpen(setup))
        #expect(Self.lastJSON(loose.stdout)["node"] as? String == setup.microphone,
                "a non-strict run's program is refused what its user reaches: \(String(decoding: loose.stdout, as: UTF8.self)) \(loose.stderr)")
        let strict = try RunTests.run(user, setup, ["--camera", "--strict", "--"] + Self.probeOpen(setup))
        let said = Self.lastJSON(strict.stdout)
        #expect(said["node"] == nil && said["error"] as? String == "denied",
                "devaccessd opened the microphone for a strict camera run: \(said) \(strict.stderr)")
        let refusals = try setup.ledger().events().map(\.event).filter {
            $0.type == .refused && $0.details["operation"] == "open" && $0.actor?.uid == user.uid
        }
        #expect(refusals.contains { ($0.details["reason"] ?? "").contains("strict") }, "\(refusals)")
    }

    /// A descendant that left the run's process tree (setsid, its parent exited: reparented
    /// to init) keeps the run's group id, which the kernel stamps on its connection.
    @Test func aDoubleForkedDescendantOfAStrictRunIsStillJudgedAsTheRun() throws {
        let setup = try RunTests.setup()
        let (user, _) = try Self.userWithAudio("sjfork", setup)
        let marks = try TemporaryDirectory()
        #expect(chmod(marks.path, 0o777) == 0)
        let output = marks.path + "/out", done = marks.path + "/done"
        let probe = Self.probeOpen(setup).map { "'\($0)'" }.joined(separator: " ")
        // The middle shell forks the probe's shell and exits; the run's program waits for it.
        let script = "setsid /bin/sh -c \"( \(probe) > $1; : > $2 ) &\" </dev/null >/dev/null 2>&1; "
            + "while [ ! -e \"$2\" ]; do sleep 0.05; done"
        let strict = try RunTests.run(user, setup, ["--camera", "--strict", "--", "/bin/sh", "-c", script, "sh",
                                                    output, done])
        #expect(strict.status == 0, "\(strict.stderr)")
        let said = Self.lastJSON((try? Data(contentsOf: URL(fileURLWithPath: output))) ?? Data())
        #expect(!said.isEmpty, "the descendant never asked")
        #expect(said["node"] == nil && said["error"] as? String == "denied",
                "devaccessd opened the microphone for a descendant that left the strict run's tree: \(said)")
    }

    /// `devaccess run --microphone` from inside a strict camera run: refused, nothing started.
    @Test func aNestedRunFromAStrictRunIsRefused() throws {
        let setup = try RunTests.setup()
        let (user, _) = try Self.userWithAudio("sjnest", setup)
        let inner = [TestProcess.devaccessBinary, "run", "--socket", setup.daemon.socketPath, "--microphone", "--",
                     "/bin/sh", "-c", "if ( exec 3<>\"$1\" ); then echo opened; else echo refused; fi", "sh",
                     setup.microphone]
        let nested = try RunTests.run(user, setup, ["--camera", "--strict", "--", "/usr/bin/env",
                                                    "DEVACCESS_TEST_DEVICES=\(setup.devices)"] + inner)
        let said = String(decoding: nested.stdout, as: UTF8.self)
        #expect(!said.contains("opened"), "a nested run opened the microphone from a strict camera run: \(said)")
        #expect(nested.stderr.contains("strict"), "the refusal does not say why: \(nested.stderr)")
        let runs = try setup.ledger().runs(uid: user.uid, includeEnded: true)
        #expect(runs.count == 1 && runs.first?.permissions == [.camera], "a nested run was started: \(runs)")
    }

    /// `devaccess request microphone` from inside a strict camera run: the policy would allow
    /// it to the user at large, but the run cannot add what it was not given.
    @Test func aStrictRunCannotRequestWhatItWasNotGiven() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("sjreq")
        let request = [TestProcess.devaccessBinary, "request", "microphone", "--socket", setup.daemon.socketPath]
        let asked = try RunTests.run(user, setup, ["--camera", "--strict", "--"] + request)
        #expect(asked.status != 0, "\(String(decoding: asked.stdout, as: UTF8.self)) \(asked.stderr)")
        let microphone = try setup.grants(user).filter { $0.permission == .microphone }
        #expect(microphone.isEmpty, "a strict camera run recorded a microphone grant: \(microphone)")
    }

    /// The gpsd endpoint is location too: a strict camera run whose user holds a location
    /// grant is served nothing there, while a plain run of the same user is served at the
    /// user's level (else this test would prove nothing).
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func aStrictRunWithoutLocationIsServedNothingAtTheGpsdEndpoint() throws {
        let setup = try RunLocationAttackTests.Setup()
        let user = try TestUser("sjgpsd")
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name] + setup.requests.socket).status == 0)
        func watch(_ options: [String], _ mark: String) throws -> [String: Any]? {
            let (status, _, stderr) = try RunTests.run(user, setup.requests, options + [
                "--", RunLocationAttackTests.python, "-c", RunLocationAttackTests.helpers + """
                s = socket.create_connection(("127.0.0.1", port))
                say(marks + "/\(mark)", watch(s, 1, 8))
                """, String(setup.port), setup.marks.path,
            ])
            #expect(status == 0, "\(stderr)")
            return setup.report(mark, within: 5)
        }
        let plain = try watch(["--camera"], "plain")
        #expect((plain?["tpv"] as? Int ?? 0) > 0, "a plain run was not served at its user's level: \(plain ?? [:])")
        let strict = try watch(["--camera", "--strict"], "strict")
        #expect(strict != nil && strict?["tpv"] as? Int == 0, "a strict camera run was served location: \(strict ?? [:])")
    }
}
