import FoundationEssentials
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessProtocol
import DevAccessPAM
import DevAccessInterface

/// How the broker runs consent conversations.
public struct RequestSettings: Sendable {
    /// How long a prompt waits for its answer; then the request ends with no decision.
    public var promptTimeout: Duration = .seconds(60)
    /// Password prompts of one `auth_self` request before it ends with no decision.
    public var passwordAttempts = 3
    /// The PAM service that checks passwords (/etc/pam.d/SERVICE).
    public var pamService = PasswordCheck.service
    /// Threads that run PAM; checks beyond them wait, at most `pamQueueLimit`, then are refused `busy`.
    public var pamThreads = 2
    public var pamQueueLimit = 32
    /// The wait after a user's first wrong password before their next check; it doubles
    /// with each further wrong one, up to `passwordBackoffCap`, until a right one.
    public var passwordBackoff: Duration = .seconds(1)
    public var passwordBackoffCap: Duration = .seconds(300)
    /// How long a password answer may wait for its turn (the back-off, the user's check in
    /// flight); a longer wait is refused `busy`, saying how long.
    public var passwordWaitLimit: Duration = .seconds(15)
    /// Requests of one user in a consent conversation (ask, password) at once; root and
    /// administrators are not limited.
    public var maxOpenPromptsPerUser = 4
    /// Clients of one user waiting (`wait`) for an administrator at once; root and
    /// administrators are not limited.
    public var maxWaitingPerUser = 16
    /// Requests waiting for an administrator in the ledger that one person (`Peer.accountable`:
    /// a user with the subordinate uids of their user namespaces) may have queued; root and
    /// administrators are not limited. A uid's own are few (one per permission, a location
    /// request per level), but each of a user's 65,536 subordinate uids queues its own, and
    /// a queue larger than a reply leaves administrators unable to list anyone's.
    public var maxQueuedPerPerson = 16
    /// Standing allow grants the subordinate uids of one person's user namespaces may hold
    /// together (the person's own uid is not counted); root and administrators are not
    /// limited. Each grant is an ACL entry on every node of the device, and a node's ACL
    /// holds a few hundred (ext4) to some 8,000 (tmpfs) entries: without the limit one user
    /// fills it from subordinate uids under a policy `allow`, and nobody else's grant can be
    /// applied (ENOSPC); every engine run also grows with the grants, delaying expiries.
    public var maxSubordinateGrantsPerPerson = 16
    /// Requests of one user that ask, queue or decide, and their own revokes, resets and
    /// withdraws, per minute; root and administrators are not limited.
    public var maxChangesPerMinute = 60
    /// Status subscriptions (`subscribe`) one user holds at once; root and administrators
    /// are not limited. Each costs an evaluation per change, so thousands must not be free.
    public var maxSubscriptionsPerUser = 8
    /// Device opens (`open`) of one user written to the audit trail per minute (per
    /// `auditWindow`); more are served and counted, and the count is written when the
    /// window ends.
    public var maxAuditedOpensPerMinute = 60
    /// The window over which a user's attempts that change nothing, and their audited
    /// opens, are counted (UserBudget).
    public var auditWindow: Duration = .seconds(60)
    /// Where the devaccess CLI is installed: a request the CLI carries is named after the
    /// program that ran it (`Requester`). Default: `devaccess` beside devaccessd's own
    /// executable (a build directory, one libexec directory) and in `../bin` of it
    /// (devaccessd in PREFIX/sbin, devaccess in PREFIX/bin, as scripts/install.sh puts them).
    public var cliPaths: [String] = RequestSettings.installedCLI()
    /// False (`DEVACCESSD_STATUS_CACHE=off`): every status reads everything afresh (to
    /// compare, or to rule the cache out when something looks stale).
    public var keepsStatusInputs = true
    /// TEST-ONLY (DEBUG builds, `DEVACCESS_TEST_INOTIFY_FAIL=ENOSPC`): every inotify watch
    /// fails with this errno, as when the limit is reached.
    public var testFailWatches: CInt?
    /// TEST-ONLY (DEBUG builds, `DEVACCESS_TEST_ENFORCER_FAIL=EMFILE`): making the engine's
    /// worker fails with this errno, as when its eventfd cannot be made.
    public var testFailEnforcer: CInt?
    /// TEST-ONLY (DEBUG builds, `DEVACCESS_TEST_CRASH_AT`): `Enforcer.testCrashAt` of the engine.
    public var testCrashAt: String?

    public init() {}

    /// The places `cliPaths` names by default, canonical as /proc/PID/exe reports them.
    public static func installedCLI() -> [String] {
        guard let own = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return [] }
        let directory = URL(fileURLWithPath: own).deletingLastPathComponent()
        let candidates = [directory.appendingPathComponent("devaccess"),
                          directory.appendingPathComponent("../bin/devaccess")]
        return candidates.map { $0.standardizedFileURL.resolvingSymlinksInPath().path }
    }

    /// `DEVACCESS_PROMPT_TIMEOUT` (seconds, 1...3600) sets the prompt timeout and
    /// `DEVACCESSD_STATUS_CACHE=off` turns the status cache off. In DEBUG builds only,
    /// `DEVACCESS_TEST_PAM_SERVICE` names another PAM service, so tests never depend on (or
    /// replace) an installed /etc/pam.d/devaccess, `DEVACCESS_TEST_AUDIT_WINDOW` (seconds)
    /// shortens the attempt throttle's window, `DEVACCESS_TEST_INOTIFY_FAIL=ENOSPC` fails
    /// every watch, `DEVACCESS_TEST_ENFORCER_FAIL=EMFILE` fails the engine's worker and
    /// `DEVACCESS_TEST_CRASH_AT` arms a crash point.
    public static func fromEnvironment(_ environment: ProcessEnvironment) -> RequestSettings {
        typealias Name = ProcessEnvironment.Name
        var settings = RequestSettings()
        if let text = environment[Name.promptTimeout], let seconds = Int(text), (1...3600).contains(seconds) {
            settings.promptTimeout = .seconds(seconds)
        }
        settings.keepsStatusInputs = environment.keepsStatusInputs
        #if DEBUG
        if let service = environment[Name.testPAMService], !service.isEmpty, !service.contains("/") {
            settings.pamService = service
        }
        // A shorter window lets a test see the count carried into the next one.
        if let text = environment[Name.testAuditWindow], let seconds = Int(text), (1...3600).contains(seconds) {
            settings.auditWindow = .seconds(seconds)
        }
        if environment[Name.testInotifyFail] == "ENOSPC" { settings.testFailWatches = ENOSPC }
        if environment[Name.testEnforcerFail] == "EMFILE" { settings.testFailEnforcer = EMFILE }
        settings.testCrashAt = environment[Name.testCrashAt]
        #endif
        return settings
    }

    var promptTimeoutSeconds: Int64 { max(1, promptTimeout.components.seconds) }
}

/// Requesters waiting for an administrator's decision on a pending request, by request id.
final class ApprovalWaiters: Sendable {
    /// What an approval or rejection did, per permission of the pending request.
    struct Outcome: Sendable {
        var request: PendingRequest
        var results: [RequestResult]
    }

    typealias Delivery = @Sendable (Outcome) -> Void

    private struct Waiter {
        var token: UInt64
        var deliver: Delivery
    }

    private let state = Mutex<(waiters: [Int64: [Waiter]], next: UInt64)>(([:], 1))

    /// Registers `deliver` for request `id`; the token cancels it.
    func wait(for id: Int64, _ deliver: @escaping Delivery) -> UInt64 {
        state.withLock { state in
            let token = state.next
            state.next += 1
            state.waiters[id, default: []].append(Waiter(token: token, deliver: deliver))
            return token
        }
    }

    func cancel(_ token: UInt64) {
        state.withLock { state in
            for (id, list) in state.waiters {
                let kept = list.filter { $0.token != token }
                state.waiters[id] = kept.isEmpty ? nil : kept
            }
        }
    }

    /// Tells everyone waiting for `outcome.request` and forgets them.
    func resolve(_ outcome: Outcome) {
        let waiting = state.withLock { $0.waiters.removeValue(forKey: outcome.request.id) ?? [] }
        for waiter in waiting { waiter.deliver(outcome) }
    }
}
