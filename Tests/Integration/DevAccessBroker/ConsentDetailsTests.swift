import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

/// A process a test user runs in the background (setpriv execs, so its pid is the
/// program's), whose first line of output the test waits for.
final class UserProcess {
    let process = Process()
    private let output = Pipe()

    init(_ user: TestUser, _ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--", executable] + arguments
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// The first line it prints (within `timeout` seconds).
    func firstLine(timeout: Double = 30) throws -> String {
        let handle = output.fileHandleForReading
        var data = Data()
        let deadline = Date().addingTimeInterval(timeout)
        while !data.contains(UInt8(ascii: "\n")) {
            guard Date() < deadline, process.isRunning || !data.isEmpty else {
                throw SetupError("no line from pid \(pid) within \(timeout) s")
            }
            var descriptor = pollfd(fd: handle.fileDescriptor, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 100) > 0 {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                data += chunk
            }
        }
        return String(decoding: data.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
    }

    func kill() {
        Glibc.kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGKILL, then how long until `condition` held (polled every 0.2 ms, for up to
    /// `bound` seconds), measured from the signal; reaped afterwards (until then the broker
    /// sees a zombie, which counts as exited).
    func kill(thenWithin bound: Double, _ condition: () -> Bool) -> Double? {
        let started = Date()
        Glibc.kill(pid, SIGKILL)
        var took: Double?
        while Date().timeIntervalSince(started) < bound {
            if condition() {
                took = Date().timeIntervalSince(started)
                break
            }
            usleep(200)
        }
        process.waitUntilExit()
        return took
    }

    deinit {
        if process.isRunning { kill() }
    }
}

/// A library client (python) that asks for `permissions` with scope `once`, prints the
/// decision's first result, and keeps running until killed.
let onceClient = """
    import socket, sys, json, time
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(json.dumps({"version": 1, "id": 1, "type": "request", "permissions": ["camera"], "scope": "once"}).encode() + b"\\n")
    buf = b""
    while not buf.endswith(b"\\n"):
        d = s.recv(65536)
        if not d: break
        buf += d
    reply = json.loads(buf)
    print(json.dumps(reply.get("results", [reply])[0]), flush=True)
    time.sleep(600)
    """

/// Polls `condition` every 5 ms for up to `bound` seconds; how long it took, nil if never.
func within(_ bound: Double, _ condition: () throws -> Bool) rethrows -> Double? {
    let started = Date()
    while Date().timeIntervalSince(started) < bound {
        if try condition() { return Date().timeIntervalSince(started) }
        usleep(5_000)
    }
    return nil
}

/// Whether the node's access ACL has a named-user entry for `uid` (libacl, in-process, so
/// polling it measures the broker rather than process start-up).
func hasUserEntry(_ path: String, uid: UInt32) -> Bool {
    guard let entries = try? ACLReader.extendedEntries(at: path) else { return false }
    return entries.contains { $0.tag == .user(uid) }
}

/// Start time of `pid` in clock ticks (/proc/PID/stat field 22).
func startTicks(_ pid: Int32) throws -> UInt64 {
    let text = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    let fields = try #require(text.split(separator: ")").last).split(separator: " ")
    return try #require(UInt64(fields[19]))
}

/// The consent details of issue 10 end to end: `once` lasts while the process that asked
/// runs, a longer request extends a grant, an administrator chooses the term of an
/// approval or declines a request, and a user forgets their own denial but no one else's.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users, nodes and PAM files"))
struct ConsentDetailsTests {
    /// A program asks `once`, gets the entry, is killed: the entry goes within 2 s, and the
    /// ledger says the grant ended because its process exited.
    @Test func onceLastsWhileTheLibraryClientThatAskedRuns() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("oncelib")
        let client = try UserProcess(user, "/usr/bin/python3", ["-c", onceClient, setup.daemon.socketPath])
        let result = try json(try client.firstLine())
        #expect(result["outcome"] as? String == "granted" && result["term"] as? String == "once", "\(result)")
        #expect(try user.canOpen(setup.camera, .readWrite), "granted while the program runs")
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.scope == .once && grant.expires == nil && grant.revoked == nil)
        #expect(grant.holder?.pid == client.pid, "the library's own process: \(String(describing: grant.holder))")
        #expect(grant.holder?.startTicks == (try startTicks(client.pid)))
        // Still there a while later: a process-bound grant has no 5-minute window.
        usleep(300_000)
        #expect(try user.canOpen(setup.camera, .readWrite))

        #expect(hasUserEntry(setup.camera, uid: user.uid))
        let took = client.kill(thenWithin: 2) { !hasUserEntry(setup.camera, uid: user.uid) }
        #expect(took != nil, "the entry outlived its process by more than 2 s")
        #expect(try !user.canOpen(setup.camera, .read))
        var figures = [took ?? 2]
        // A few more, for the figure.
        for _ in 0..<9 {
            let again = try UserProcess(user, "/usr/bin/python3", ["-c", onceClient, setup.daemon.socketPath])
            _ = try again.firstLine()
            try #require(hasUserEntry(setup.camera, uid: user.uid))
            figures.append(again.kill(thenWithin: 2) { !hasUserEntry(setup.camera, uid: user.uid) } ?? 2)
        }
        let sorted = figures.sorted().map { String(format: "%.1f", $0 * 1000) }
        print("FIGURE once/library: SIGKILL -> ACL entry gone, ms (sorted, 10 runs): \(sorted.joined(separator: " "))")
        #expect(figures.allSatisfy { $0 < 2 })
        #expect(try setup.grants(user).allSatisfy { $0.revoked != nil })
        let expiry = try setup.ledger().events().map(\.event).filter { $0.type == .expiry && $0.subject?.uid == user.uid }
        #expect(expiry.count == 10)
        #expect(expiry.first?.details["ended_by"] == "process-exit", "\(expiry.map(\.details))")
        #expect(expiry.first?.details["end_reason"]?.contains("(pid \(client.pid)) exited") == true,
                "\(expiry.map(\.details))")
    }

    /// From the CLI, `once` lasts while the program that ran `devaccess` runs (its parent,
    /// read from /proc by devaccessd), not the CLI itself, which exits at once.
    @Test func onceFromTheCLILastsWhileTheProgramThatRanItRuns() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("oncecli")
        let command = "\(TestProcess.devaccessBinary) request camera --once --socket \(setup.daemon.socketPath) "
            + ">/dev/null 2>&1; echo asked $?; exec sleep 600"
        let shell = try UserProcess(user, "/bin/sh", ["-c", command])
        #expect(try shell.firstLine() == "asked 0")
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.scope == .once && grant.holder?.pid == shell.pid, "\(String(describing: grant.holder))")
        #expect(try user.canOpen(setup.camera, .readWrite), "the CLI has exited; the shell that ran it has not")

        shell.kill()
        let took = try within(2) { try !user.canOpen(setup.camera, .read) }
        #expect(took != nil, "the entry outlived the process that ran the CLI by more than 2 s")
        print("FIGURE once/cli: process killed -> entry gone: "
              + "\(took.map { String(format: "%.0f ms", $0 * 1000) } ?? "> 2 s")")
        #expect(try setup.grants(user).first?.revoked != nil)
    }

    /// Down while the process that asked exits, devaccessd ends the grant at start-up,
    /// before it serves anyone; a pid that now names another process (another start time)
    /// counts as gone; a process still running keeps its grant.
    @Test func aRestartEndsOnceGrantsWhoseProcessIsGoneBeforeServing() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n[microphone]\nDefault=allow\n")
        let gone = try TestUser("oncedead")
        let alive = try TestUser("oncelive")
        let reused = try TestUser("oncereuse")
        let dying = try UserProcess(gone, "/usr/bin/python3", ["-c", onceClient, setup.daemon.socketPath])
        _ = try dying.firstLine()
        let living = try UserProcess(alive, "/usr/bin/python3", ["-c", onceClient, setup.daemon.socketPath])
        _ = try living.firstLine()
        #expect(try gone.canOpen(setup.camera, .readWrite) && alive.canOpen(setup.camera, .readWrite))

        try setup.stop()
        dying.kill()
        // A grant recorded for a running process, but with another start time: what a
        // reused pid looks like.
        let impostor = try UserProcess(reused, "/bin/sh", ["-c", "echo up; exec sleep 600"])
        _ = try impostor.firstLine()
        let boot = try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        do {
            let ledger = try Ledger(path: setup.stateDirectory + "/" + Ledger.fileName, journal: .disabled)
            let subject = Principal(uid: reused.uid, name: reused.name)
            try ledger.recordGrant(NewGrant(
                subject: subject, permission: .camera, decision: .allow, scope: .once, decidedBy: subject,
                method: .consent, holder: ProcessHolder(pid: impostor.pid, startTicks: try startTicks(impostor.pid) + 1,
                                                        bootID: boot)))
        }
        try setup.start()
        let served = Date()
        #expect(try !gone.canOpen(setup.camera, .read), "ended before devaccessd answered anyone")
        #expect(try alive.canOpen(setup.camera, .readWrite), "its process still runs")
        #expect(try !reused.canOpen(setup.camera, .read))
        let events = try setup.ledger().events().map(\.event).filter { $0.type == .expiry }
        let dead = try #require(events.first { $0.subject?.uid == gone.uid })
        #expect(dead.details["ended_by"] == "process-exit")
        #expect(dead.time <= served, "recorded at start-up, before the first answer")
        let other = try #require(events.first { $0.subject?.uid == reused.uid })
        #expect(other.details["end_reason"]?.contains("another process") == true, "\(other.details)")
        #expect(events.allSatisfy { $0.subject?.uid != alive.uid })
        living.kill()
        #expect(try within(2) { try !alive.canOpen(setup.camera, .read) } != nil, "watched again after the restart")
    }

    /// `auth_self`: a user holding `--for 10m` who asks for `--for 1h` (or always) is asked
    /// again and, with the password, gets the new term in place of the old; a shorter
    /// request is answered at once.
    @Test func aLongerRequestExtendsAnAllowedGrant() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\n")
        let user = try TestUser("extend")
        try user.setPassword("longer please 7")
        let password = [(expect: "Password", type: "longer please 7\n")]
        let short = try user.onTerminal(["request", "camera", "--for", "10m"] + setup.socket, answers: password)
        #expect(short.exit == 0, "\(short.output)")
        let first = try #require(try setup.grants(user).first)

        let longer = try user.onTerminal(["request", "camera", "--for", "1h"] + setup.socket, answers: password)
        #expect(longer.exit == 0, "\(longer.output)")
        #expect(longer.output.contains("Password"), "asked again: \(longer.output)")
        #expect(!longer.output.contains("already allowed"), "\(longer.output)")
        let grants = try setup.grants(user)
        let standing = grants.filter { $0.revoked == nil }
        try #require(standing.count == 1, "\(grants)")
        #expect(standing[0].id != first.id)
        #expect(abs(try #require(standing[0].expires).timeIntervalSince(standing[0].created) - 3600) < 2)
        #expect(grants.first { $0.id == first.id }?.revoked != nil, "the old term is replaced")
        #expect(try user.canOpen(setup.camera, .readWrite))

        let shorter = try user.onTerminal(["request", "camera", "--for", "5m", "--json"] + setup.socket)
        #expect(shorter.exit == 0 && !shorter.output.contains("Password"), "\(shorter.output)")
        #expect(shorter.output.contains(#""outcome": "already-allowed""#), "\(shorter.output)")

        let always = try user.onTerminal(["request", "camera", "--always"] + setup.socket, answers: password)
        #expect(always.exit == 0 && always.output.contains("Password"), "\(always.output)")
        #expect(try setup.grants(user).first { $0.revoked == nil }?.scope == .always)
    }

    /// MaxDuration=8h: `--always` offers (and records) 8 hours, and says it is the longest.
    @Test func alwaysUnderMaxDurationSaysItIsTheLongestThePolicyAllows() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_self\nMaxDuration=8h\n")
        let user = try TestUser("longest")
        try user.setPassword("eight hours 8")
        let run = try user.onTerminal(["request", "camera", "--always", "--json"] + setup.socket,
                                      answers: [("Password", "eight hours 8\n")])
        #expect(run.exit == 0, "\(run.output)")
        #expect(run.output.contains("for 8h (the longest the policy allows)"), "\(run.output)")
        let grant = try #require(try setup.grants(user).first)
        #expect(grant.scope == .duration)
        #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 8 * 3600) < 2)
        #expect(run.output.contains(#""term": "for""#), "the recorded term is what was said: \(run.output)")
    }

    /// `approve ID --for D` sets the term; `reject ID` declines (nothing recorded, the next
    /// request is queued again); `reject ID --deny` records a denial. On the wire, a `reject`
    /// without `deny` declines too, and `deny` is a boolean.
    @Test func approveChoosesTheTermRejectDeclinesAndRejectDenyDenies() throws {
        let carol = try TestUser("apadm")
        let setup = try RequestSetup(policy: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n",
                                     admins: [carol])
        let erin = try TestUser("apreq")
        _ = try erin.onTerminal(["request", "camera", "--for", "2h"] + setup.socket)
        let approved = try carol.devaccess(["approve", "1", "--for", "10m", "--json"] + setup.socket)
        #expect(approved.status == 0, "\(approved.stderr)")
        let grant = try #require(try setup.grants(erin).first)
        #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 600) < 2, "the admin's term")
        #expect(try erin.canOpen(setup.camera, .readWrite))
        #expect(try carol.devaccess(["approve", "1", "--once", "--for", "1h"] + setup.socket).status == 64)

        _ = try erin.onTerminal(["request", "microphone"] + setup.socket)
        let declined = try carol.devaccess(["reject", "2", "--reason", "not today"] + setup.socket)
        #expect(declined.status == 0, "\(declined.stderr)")
        #expect(declined.stdout.contains("request 2 of \(erin.name) (uid \(erin.uid)) declined"), "\(declined.stdout)")
        #expect(try setup.grants(erin).allSatisfy { $0.permission == .camera }, "nothing recorded for the microphone")
        #expect(try setup.ledger().pendingRequest(id: 2)?.resolution == .declined)
        let again = try erin.onTerminal(["request", "microphone", "--json"] + setup.socket)
        #expect(again.output.contains(#""outcome": "pending""#), "asked again, queued again: \(again.output)")
        let third = try #require(try setup.ledger().pendingRequests().first)

        let denied = try carol.devaccess(["reject", String(third.id), "--deny"] + setup.socket)
        #expect(denied.status == 0, "\(denied.stderr)")
        let denial = try #require(try setup.grants(erin).first { $0.permission == .microphone })
        #expect(denial.decision == .deny && denial.method == .admin)
        let after = try erin.onTerminal(["request", "microphone", "--json"] + setup.socket)
        #expect(after.output.contains(#""outcome": "already-denied""#), "\(after.output)")

        // On the wire: reject without `deny` declines, recording nothing.
        try #require(try carol.devaccess(["reset", "--user", erin.name] + setup.socket).status == 0)
        _ = try erin.onTerminal(["request", "camera"] + setup.socket)
        let queued = try #require(try setup.ledger().pendingRequests().first)
        let line = #"{"version":1,"id":5,"type":"reject","pending":\#(queued.id)}"#
        let plain = try carol.python(PythonClient.oneMessage, [setup.daemon.socketPath, line])
        let reply = try #require(try json(plain.stdout)["reply"] as? [String: Any])
        #expect(reply["resolution"] as? String == "declined" && reply["version"] as? Int == 1, "\(reply)")
        #expect(try setup.ledger().pendingRequest(id: queued.id)?.resolution == .declined)
        // And `deny` is a boolean, strictly.
        _ = try erin.onTerminal(["request", "camera"] + setup.socket)
        let next = try #require(try setup.ledger().pendingRequests().first)
        let strict = try carol.python(PythonClient.oneMessage, [setup.daemon.socketPath,
            #"{"version":1,"id":6,"type":"reject","pending":\#(next.id),"deny":"yes"}"#])
        #expect(strict.stdout.contains("bad-message"), "\(strict.stdout)")
    }

    /// `revoke` without --user is the caller's own, as `reset` is: a user ends their own grant,
    /// and devaccessd still says no to another's.
    @Test func revokeWithoutUserIsYourOwn() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let user = try TestUser("revself")
        let other = try TestUser("revoth")
        try #require(try TestProcess.devaccess(["grant", "camera", "--user", other.name] + setup.socket).status == 0)
        try #require(try user.withoutTerminal(["request", "camera", "--always"] + setup.socket).status == 0)
        let revoked = try user.devaccess(["revoke", "camera"] + setup.socket)
        #expect(revoked.status == 0 && revoked.stdout.contains("revoked"), "\(revoked.stdout) \(revoked.stderr)")
        #expect(try setup.grants(user).filter { $0.decision == .allow && $0.isActive(at: Date()) }.isEmpty, "her grant ended")
        #expect(try user.devaccess(["revoke", "camera", "--user", other.name] + setup.socket).status == 77)
        #expect(try setup.grants(other).contains { $0.decision == .allow && $0.isActive(at: Date()) }, "the other's grant stays")
    }

    /// An administrator's denial is not the user's to forget: `reset` without --user is
    /// refused (77) and audited, and the denial stays.
    @Test func aUserCannotForgetAnAdministratorsDenial() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("adminden")
        let deny = try TestProcess.devaccess(["deny", "camera", "--user", user.name] + setup.socket)
        #expect(deny.status == 0, "\(deny.stderr)")
        let reset = try user.devaccess(["reset", "camera"] + setup.socket)
        #expect(reset.status == 77, "\(reset.stdout) \(reset.stderr)")
        #expect(reset.stderr.contains("via admin, not by you at a prompt"), "\(reset.stderr)")
        #expect(try setup.grants(user).first?.decision == .deny, "the denial stays")
        let refused = try setup.ledger().events().map(\.event).filter { $0.type == .refused }
        #expect(refused.contains { $0.details["operation"] == "reset" && $0.actor?.uid == user.uid }, "\(refused)")
        // Nor anyone else's decisions.
        let other = try TestUser("adminoth")
        #expect(try other.devaccess(["reset", "camera", "--user", user.name] + setup.socket).status == 77)
    }
}

extension LoginSessions {
    /// The same details where a person answers on their login terminal.
    @Suite
    struct ConsentDetailsAtTheLoginTerminalTests {
        static let question = "within"

        /// MaxDuration=8h and `--always`: the choice offered is "Allow for 8h (the longest
        /// the policy allows)", never an "always" that would silently become 8h.
        @Test func alwaysUnderMaxDurationIsOfferedAsTheLongestTime() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=ask\nMaxDuration=8h\n")
            let user = try TestUser("lmax", shell: "/bin/sh")
            let run = try LoginTerminal.run(user: user, command: [TestProcess.devaccessBinary, "request", "camera",
                                                                  "--always"] + setup.socket,
                                            answers: [(Self.question, "allow camera for 8h {code}\n")], timeout: 90)
            #expect(run.exitStatus == 0, "\(run.output)")
            #expect(run.output.contains("Allow for 8h (the longest the policy allows)"), "\(run.output)")
            #expect(!run.output.contains("Allow always"), "\(run.output)")
            let grant = try #require(try setup.grants(user).first)
            #expect(grant.scope == .duration && grant.method == .consent)
            #expect(abs(try #require(grant.expires).timeIntervalSince(grant.created) - 8 * 3600) < 2)
        }

        /// Location asked at street: the person may allow it coarser by typing the level
        /// ("allow location for 1h city CODE"), as iOS lets one turn "precise" off; the grant records city, and
        /// a level finer than asked is not an answer.
        @Test func thePersonMayAllowLocationCoarserThanAsked() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[location]\nDefault=ask\n", location: true)
            let user = try TestUser("lcoarse", shell: "/bin/sh")
            let run = try LoginTerminal.run(user: user, command: [TestProcess.devaccessBinary, "request", "location",
                                                                  "--accuracy", "street", "--for", "1h"] + setup.socket,
                                            answers: [(Self.question, "allow location for 1h exact {code}\n"),
                                                      (Self.question, "allow location for 1h city {code}\n")], timeout: 90)
            // 2: limited, which a grant below exact is.
            #expect(run.exitStatus == 2, "\(run.output)")
            #expect(run.output.contains("allowed at city accuracy"), "\(run.output)")
            #expect(run.output.contains("or allow a coarser location: add one of neighborhood (about 1 km), city"),
                    "\(run.output)")
            #expect(run.output.contains("that is not an answer"), "exact is finer than asked: \(run.output)")
            let grant = try #require(try setup.grants(user).first)
            #expect(grant.decision == .allow && grant.method == .consent && grant.accuracy == .city, "\(grant)")
            let prompts = try setup.requestEvents(user).filter { $0.details["stage"] == "prompt" }
            #expect(prompts.contains { $0.details["accuracy_chosen"] == "city" }, "\(prompts)")
        }

        /// A user's own "deny" at the prompt: `devaccess reset camera` (no --user) forgets
        /// it through devaccessd, and the next request asks again.
        @Test func aUserForgetsTheirOwnDenial() throws {
            let settings = try TerminalSettings(legacyTIOCSTI: 0)
            defer { settings.restore() }
            let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
            let user = try TestUser("lundo", shell: "/bin/sh")
            let request = [TestProcess.devaccessBinary, "request", "camera"] + setup.socket
            let denied = try LoginTerminal.run(user: user, command: request,
                                               answers: [(Self.question, "deny {code}\n")], timeout: 90)
            #expect(denied.exitStatus == 3, "\(denied.output)")
            try #require(try setup.grants(user).first?.decision == .deny)

            let reset = try user.devaccess(["reset", "camera"] + setup.socket)
            #expect(reset.status == 0, "\(reset.stdout) \(reset.stderr)")
            #expect(try setup.grants(user).isEmpty, "forgotten")
            let resets = try setup.ledger().events().map(\.event).filter { $0.type == .reset }
            #expect(resets.count == 1 && resets.first?.actor?.uid == user.uid)
            // Asked again (and left unanswered: nothing recorded).
            let again = try LoginTerminal.run(user: user, command: request, timeout: 90)
            #expect(again.output.contains("the code"), "asked again: \(again.output)")
            #expect(try setup.grants(user).isEmpty)
        }
    }
}
