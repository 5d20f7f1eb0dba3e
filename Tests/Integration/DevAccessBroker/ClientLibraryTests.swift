import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// The DevAccess library (Sources/DevAccess) as a real user's program uses it, against a
/// real devaccessd: the probe program makes each call as the user and prints the answer.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct ClientLibraryTests {
    /// The status is the caller's own (the kernel's uid, not root's), and changes with a grant.
    @Test func statusIsTheCallersOwn() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("libstat")
        let socket = setup.daemon.socketPath
        let before = try LibraryProbe.run(erin, socket: socket, ["status", "camera"])
        let statuses = try #require(before["statuses"] as? [[String: Any]], "\(before)")
        #expect(statuses.count == 1)
        #expect(statuses.first?["status"] as? String == "notDetermined", "\(before)")
        #expect(statuses.first?["devices"] as? [String] == ["camera:test-video-index0"])

        let granted = try TestProcess.devaccess(["grant", "camera", "--user", erin.name, "--always"] + setup.socket)
        #expect(granted.status == 0, "\(granted.stderr)")
        let after = try LibraryProbe.run(erin, socket: socket, ["status"])
        let all = try #require(after["statuses"] as? [[String: Any]], "\(after)")
        #expect(all.map { $0["permission"] as? String } == ["camera", "microphone", "location"])
        #expect(all.first?["status"] as? String == "authorized", "\(after)")
    }

    /// A required permission that ends restricted throws the error naming it; the same
    /// permission asked as optional only reports its outcome, and the rest is granted.
    @Test func requiredFailsNamingThePermissionOptionalDoesNot() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n[microphone]\nDefault=deny\n")
        let erin = try TestUser("libreq")
        let socket = setup.daemon.socketPath
        let optional = try LibraryProbe.run(erin, socket: socket, ["request", "--required", "camera", "--term", "always",
                                                                   "--reason", "video call", "camera", "microphone"])
        let results = try #require(optional["results"] as? [[String: Any]], "\(optional)")
        #expect(results.map { $0["permission"] as? String } == ["camera", "microphone"])
        #expect(results.map { $0["outcome"] as? String } == ["allowed", "restricted"], "\(results)")
        #expect(try erin.canOpen(setup.camera, .readWrite), "the grant is real: the user opens the node")
        #expect(try !erin.canOpen(setup.microphone, .read))

        let required = try LibraryProbe.run(erin, socket: socket, ["request", "--required", "microphone", "camera",
                                                                   "microphone"])
        #expect(required["error"] as? String == "restricted", "\(required)")
        #expect(required["permission"] as? String == "microphone")
        #expect(try !erin.canOpen(setup.microphone, .read))

        // An unknown permission is not something this machine has: `unsupported`.
        let unknown = try LibraryProbe.run(erin, socket: socket, ["request", "--required", "speaker", "speaker"])
        #expect(unknown["error"] as? String == "unsupported", "\(unknown)")
        // Among others, the error names the one devaccessd does not know.
        let among = try LibraryProbe.run(erin, socket: socket, ["request", "camera", "speaker"])
        #expect(among["error"] as? String == "unsupported" && among["permission"] as? String == "speaker", "\(among)")
    }

    /// `once` holds while the program that asked runs: the probe's own process (the
    /// library is its own client, no CLI in between), ended when it exits.
    @Test func onceLastsWhileTheCallingProcessRuns() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let erin = try TestUser("libonce")
        let result = try LibraryProbe.run(erin, socket: setup.daemon.socketPath, ["request", "--term", "once", "camera"])
        let results = try #require(result["results"] as? [[String: Any]], "\(result)")
        #expect(results.first?["outcome"] as? String == "allowed")
        // The probe has exited: devaccessd's pidfd watch ends the grant (bounded wait).
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, try erin.canOpen(setup.camera, .read) { usleep(20_000) }
        #expect(try !erin.canOpen(setup.camera, .read), "the once grant outlived its process")
        let grants = try setup.grants(erin)
        #expect(grants.count == 1 && grants.first?.isActive(at: Date()) == false, "\(grants)")
    }

    /// Cancelling the task of a request that waits for an administrator withdraws it: the
    /// queue no longer holds it (devaccessd alone would keep it queued after the requester left).
    @Test func cancellingTheTaskWithdrawsTheWaitingRequest() throws {
        let carol = try TestUser("libadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n", admins: [carol])
        let erin = try TestUser("libcancel")
        let probe = try RunningProbe(erin, socket: setup.daemon.socketPath,
                                     ["request", "--required", "camera", "--reason", "lab", "camera"])
        let admin = try setup.daemon.client()
        var waiting: [PendingItem] = []
        let deadline = Date().addingTimeInterval(10)
        while waiting.isEmpty && Date() < deadline {
            waiting = try admin.pending().requests
            if waiting.isEmpty { usleep(20_000) }
        }
        #expect(waiting.map(\.uid) == [erin.uid], "the request never reached the queue")
        #expect(probe.lines.isEmpty, "the call returned before anyone decided: \(probe.lines)")

        probe.signal(SIGUSR1)
        #expect(probe.waitForExit() == 1)
        let lines = try probe.waitForLines(1)
        #expect(lines.last?["error"] as? String == "cancelled", "\(lines)")
        #expect(try admin.pending().requests.isEmpty, "the cancelled request is still queued")
        let stored = try setup.ledger().pendingRequests(includeResolved: true)
        #expect(stored.count == 1 && stored.first?.isWaiting == false, "\(stored)")
        #expect(try !erin.canOpen(setup.camera, .read))
    }

    /// `ask` without a login terminal devaccessd trusts: it cannot ask a person the
    /// program cannot answer for, so a required permission throws `noConsentChannel`.
    @Test func withoutAConsentChannelARequiredPermissionSaysSo() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("libnochan")
        let result = try LibraryProbe.run(erin, socket: setup.daemon.socketPath, ["request", "--required", "camera", "camera"])
        #expect(result["error"] as? String == "noConsentChannel", "\(result)")
        #expect(result["permission"] as? String == "camera")
        #expect(try setup.grants(erin).isEmpty, "nothing was recorded")
    }

    /// No broker at the socket: `brokerUnavailable`, not a hang or a crash.
    @Test func noBrokerIsBrokerUnavailable() throws {
        let erin = try TestUser("libnone")
        let directory = try TemporaryDirectory()
        let result = try LibraryProbe.run(erin, socket: directory.path + "/nothing.sock", ["status"])
        #expect(result["error"] as? String == "brokerUnavailable", "\(result)")
    }
}

/// `location(accuracy:)` from a real gpsd (gpsfake) through devaccessd, at the user's grant.
@Suite(.serialized, .enabled(if: isRoot && GpsFakeProcess.isInstalled, "needs root and gpsfake"))
struct ClientLibraryLocationTests {
    @Test func locationIsServedAtTheGrantAndRefusedWithout() throws {
        let setup = try LocationServingTests.Setup()
        let city = try TestUser("libloc")
        let none = try TestUser("liblocnone")
        try setup.grant(city, ["--accuracy", "city"])
        let socket = setup.daemon.socketPath
        var served = try LibraryProbe.run(city, socket: socket, ["location"])
        // gpsd may not have a fix for the first few hundred milliseconds.
        for _ in 0..<20 where served["error"] as? String == "unsupported" {
            usleep(250_000)
            served = try LibraryProbe.run(city, socket: socket, ["location"])
        }
        #expect(served["accuracy"] as? String == "city", "\(served)")
        let latitude = try #require(served["latitude"] as? Double), longitude = try #require(served["longitude"] as? Double)
        #expect(LocationServingTests.metres(latitude, longitude) < 10_000, "a city cell's centre is within its size")
        #expect(latitude != LocationServingTests.truth.latitude, "the exact position reached a city grant")

        let sampled = try LibraryProbe.run(city, socket: socket, ["location-updates"])
        #expect(sampled["accuracy"] as? String == "city" && sampled["latitude"] as? Double == latitude, "\(sampled)")

        let finer = try LibraryProbe.run(city, socket: socket, ["location", "exact"])
        #expect(finer["error"] as? String == "denied" && finer["permission"] as? String == "location", "\(finer)")
        let refused = try LibraryProbe.run(none, socket: socket, ["location"])
        #expect(refused["error"] as? String == "denied", "\(refused)")
    }
}

extension LoginSessions {
    /// A program on the library asks with devaccessd's prompt on the user's login terminal:
    /// a person answers there; cancelling the program's task closes the prompt.
    @Suite
    struct ClientLibraryConsentTests {
        static func probe(_ user: TestUser, _ setup: RequestSetup, _ arguments: [String],
                          answers: [(expect: String, type: String)]) throws -> LoginRun {
            try LoginTerminal.run(user: user, command: [LibraryProbe.binary] + arguments,
                                  environment: ["DEVACCESS_SOCKET": setup.daemon.socketPath], answers: answers,
                                  timeout: 60)
        }

        @Test func aPersonAllowsAtTheLoginTerminal() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
            let user = try TestUser("liblogin", shell: "/bin/sh")
            let run = try Self.probe(user, setup, ["request", "--required", "camera", "--term", "always", "--reason",
                                                   "video call", "camera"], answers: [("within", "allow camera always {code}\n")])
            #expect(run.output.contains("reason: video call"), "\(run.output)")
            #expect(run.output.contains(#""outcome":"allowed""#), "\(run.output)")
            #expect(try user.canOpen(setup.camera, .readWrite))
            #expect(try setup.grants(user).first?.method == .consent)
        }

        /// Ctrl-C reaches the program, which cancels its task: the library ends the
        /// connection, devaccessd closes the question on the terminal and records nothing.
        @Test func cancellingTheTaskClosesThePrompt() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
            let user = try TestUser("libintr", shell: "/bin/sh")
            let run = try Self.probe(user, setup, ["request", "--required", "camera", "camera"],
                                     answers: [("within", "\u{3}")])
            #expect(run.output.contains(#""error":"cancelled""#), "\(run.output)")
            #expect(run.output.contains("the request was withdrawn"), "the prompt stayed open: \(run.output)")
            #expect(try setup.grants(user).isEmpty)
            let outcomes = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
                .compactMap { $0.details["outcome"] }
            #expect(outcomes == ["client-closed"], "\(outcomes)")
        }
    }
}
