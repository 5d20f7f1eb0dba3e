import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessTestSupport

/// The DevAccess library when devaccessd goes away and comes back, and the attacks a
/// library client can make on devaccessd's bookkeeping: a real daemon, real users.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct ClientLibraryResilienceTests {
    /// A watcher must not go stale when devaccessd restarts: `statusUpdates` subscribes
    /// again and yields the status as it is then, including a change made while devaccessd
    /// was away (the policy edited), and later changes are pushed on the new subscription.
    @Test func statusUpdatesSubscribeAgainAfterARestart() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("libreconn")
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["watch", "camera"])
        #expect(try watch.waitForLines(1).first?["status"] as? String == "notDetermined")

        // Away: the policy changes while nobody could push it.
        try setup.stop()
        let policy = URL(fileURLWithPath: setup.config.path + "/devaccess.conf")
        try Data("[camera]\nDefault=deny\n".utf8).write(to: policy)
        try setup.start()
        let startedAt = Date().timeIntervalSince1970
        // Back-off is at most 5 s (and a quarter): 30 s is a generous correctness bound.
        let back = try watch.waitForLines(2, timeout: 30)
        #expect(back.last?["status"] as? String == "restricted", "the change made while away was missed: \(back)")
        let delay = (back.last?["time"] as? Double ?? .infinity) - startedAt
        print("statusUpdates: current status again \(delay) s after devaccessd answered")

        // The new subscription is live: a change is pushed, as before the restart.
        try Data("[camera]\nDefault=ask\n".utf8).write(to: policy)
        let pushed = try watch.waitForLines(3)
        #expect(pushed.last?["status"] as? String == "notDetermined", "\(pushed)")

        // A restart with nothing changed still yields the status (confirmed, not stale).
        try setup.restart()
        let confirmed = try watch.waitForLines(4, timeout: 30)
        #expect(confirmed.last?["status"] as? String == "notDetermined", "\(confirmed)")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name] + setup.socket).status == 0)
        let granted = try watch.waitForLines(5)
        #expect(granted.last?["status"] as? String == "authorized", "\(granted)")
        #expect(!watch.text.contains("ended"), "the stream finished: \(watch.text)")
        #expect(watch.process.isRunning)
    }

    /// The descriptors devaccessd holds: /proc/PID/fd.
    static func descriptorCount(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count ?? -1
    }

    /// The attack: a client subscribes and lets go a thousand times. devaccessd must end
    /// each subscription with its connection: afterwards it holds as many descriptors as
    /// before, and the user's subscription table is empty again (all 8 places free).
    @Test func aThousandSubscribeAndLetGoCyclesLeaveNothingBehind() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let mallory = try TestUser("libchurn")
        let pid = setup.daemon.pid
        let before = Self.descriptorCount(pid)
        #expect(before > 0)

        let started = Date()
        let churn = try LibraryProbe.run(mallory, socket: setup.daemon.socketPath, ["churn", "1000"])
        print("1000 subscribe/let-go cycles through statusUpdates: \(Date().timeIntervalSince(started)) s")
        #expect(churn["churned"] as? Int == 1000 && churn["received"] as? Int == 1000, "\(churn)")

        // devaccessd notices each closed connection on its own time: a bounded wait.
        var after = Self.descriptorCount(pid)
        let deadline = Date().addingTimeInterval(10)
        while after != before && Date() < deadline {
            usleep(20_000)
            after = Self.descriptorCount(pid)
        }
        print("devaccessd descriptors: \(before) before 1000 subscribe/let-go cycles, \(after) after")
        #expect(after == before, "devaccessd holds \(after - before) more descriptors")

        // Every place in the user's subscription table is free again: 8 are served, the 9th refused.
        let flood = try mallory.background(StatusSubscriptionTests.subscriptionFlood, [setup.daemon.socketPath, "9"],
                                           reportWithin: 60)
        #expect(flood.report["updates"] as? Int == 8, "\(flood.report)")
        #expect(flood.report["busy"] as? Int == 1, "\(flood.report)")
        flood.stop()
    }

    /// The attack: a library client that goes away in the middle of a request, at any
    /// moment (its task cancelled a few milliseconds in, each time later), must leave no
    /// grant and no request waiting in the approval queue.
    @Test func aClientThatLeavesMidRequestLeavesNoGrantAndNoWaitingRequest() throws {
        let carol = try TestUser("libmidadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n", admins: [carol])
        let erin = try TestUser("libmid")
        let admin = try setup.daemon.client()
        var cancelledRuns = 0
        for round in 0..<20 {
            let probe = try RunningProbe(erin, socket: setup.daemon.socketPath,
                                         ["request", "--required", "camera", "--reason", "round \(round)", "camera"],
                                         environment: ["DEVACCESS_PROBE_READY": "1"])
            _ = try probe.waitForLines(1)
            usleep(useconds_t(round * 3_000))
            probe.signal(SIGUSR1)
            let exited = probe.waitForExit()
            #expect(exited != nil, "round \(round): the probe did not end: \(probe.text)")
            if probe.lines.last?["error"] as? String == "cancelled" { cancelledRuns += 1 }
            let waiting = try admin.pending().requests
            #expect(waiting.isEmpty, "round \(round): left waiting: \(waiting.map(\.pending))")
            // A request still waiting would make the next round's "already waiting": take it out.
            for item in waiting {
                _ = try admin.resolve(item.pending, approve: false, reason: "test cleanup")
            }
        }
        #expect(cancelledRuns > 0, "no round was cancelled mid-request")
        #expect(try setup.grants(erin).isEmpty, "a grant was made for a client that left")
        #expect(try !erin.canOpen(setup.camera, .read))
    }

    /// The hostile review's case: the camera needs the user's password, the microphone an
    /// administrator. A task cancelled while devaccessd asks for the password answers the
    /// prompt "interrupted" and leaves; devaccessd used to queue the microphone for an
    /// administrator all the same, so a cancelled request left one waiting.
    @Test func aRequestCancelledAtItsPasswordPromptQueuesNothing() throws {
        let carol = try TestUser("libpwadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let frank = try TestUser("libpwmix")
        let admin = try setup.daemon.client()
        var cancelledRuns = 0
        for round in 0..<20 {
            let probe = try RunningProbe(frank, socket: setup.daemon.socketPath,
                                         ["request", "--reason", "round \(round)", "camera", "microphone"],
                                         environment: ["DEVACCESS_PROBE_READY": "1"])
            _ = try probe.waitForLines(1)
            usleep(useconds_t(round * 2_000))
            probe.signal(SIGUSR1)
            #expect(probe.waitForExit() != nil, "round \(round): the probe did not end: \(probe.text)")
            let cancelled = probe.lines.last?["error"] as? String == "cancelled"
            if cancelled { cancelledRuns += 1 }
            // devaccessd may still be finishing the request: give it the moment it needs.
            usleep(300_000)
            let waiting = try admin.pending().requests
            if cancelled {
                #expect(waiting.isEmpty, "round \(round): a cancelled request left \(waiting.map(\.pending)) waiting")
            }
            for item in waiting { _ = try admin.resolve(item.pending, approve: false, reason: "test cleanup") }
        }
        #expect(cancelledRuns > 0, "no round was cancelled mid-request")
        #expect(try setup.grants(frank).isEmpty, "a grant was made for a client that left")
    }
}

extension LoginSessions {
    /// The attack on the consent prompt: a library client that dies in the middle of a
    /// request (it _exits at Ctrl-C: no cancellation, no goodbye) while devaccessd asks its
    /// user on the login terminal.
    @Suite
    struct ClientLibraryDisconnectTests {
        @Test func aClientKilledMidPromptLeavesNoGrantAndNoPendingRequest() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
            let user = try TestUser("libkilled", shell: "/bin/sh")
            // Ctrl-C makes this probe _exit at once: no cancellation, no withdraw, no goodbye.
            let run = try LoginTerminal.run(user: user, command: [LibraryProbe.binary, "request", "--required", "camera",
                                                                  "--term", "always", "camera"],
                                            environment: ["DEVACCESS_SOCKET": setup.daemon.socketPath,
                                                          "DEVACCESS_PROBE_ON_INT": "exit"],
                                            answers: [("within", "\u{3}")], timeout: 60)
            #expect(!run.output.contains(#""results""#) && !run.output.contains(#""error""#),
                    "the probe finished its request: \(run.output)")
            #expect(run.exitStatus == 9, "the probe did not die mid-request: \(run.output)")
            #expect(try setup.grants(user).isEmpty, "a grant for a client that died")
            #expect(try setup.ledger().pendingRequests(includeResolved: true).isEmpty, "a pending row was written")
            let outcomes = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
                .compactMap { $0.details["outcome"] }
            #expect(outcomes == ["client-closed"], "the prompt did not close with its client: \(outcomes)")
            #expect(try !user.canOpen(setup.camera, .read))
        }
    }
}
