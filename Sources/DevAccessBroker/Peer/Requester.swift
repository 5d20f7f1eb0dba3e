import FoundationEssentials
import Glibc
import CSystemd
import DevAccessSystem

/// The program that really asks, as `Program=` rules, prompts, the pending list and the
/// audit name it. Usually the peer; when the peer is the devaccess CLI, the process that
/// ran the CLI (its parent, from /proc, never from the message): `devaccess request
/// camera` typed in a shell is the shell's request, run by a browser it is the browser's.
struct Requester: Sendable {
    var pid: Int32
    var uid: UInt32
    /// The executable; nil when it could not be read (then no `Program=` rule matches).
    var program: String?
    /// nil: `Program=` rules may match `program`; else why not, for reasons and the audit
    /// ("program identity not trusted: /home/u/evil.so is mapped executable and ...").
    var untrusted: String?
    /// When the devaccess CLI carried the request: its path and pid.
    var cli: Carrier?

    struct Carrier: Sendable {
        var path: String
        var pid: Int32
    }
    /// The requesting program is a login shell program (/etc/shells): a person typed the
    /// command, or a shell script ran it.
    var isShell = false
    /// devaccessd is about to start `program` itself for `devaccess run`: it asks, not the
    /// process that connected.
    var startedByRun = false

    /// What `Program=` rules are matched against.
    var policyProgram: String? { untrusted == nil ? program : nil }

    /// "/usr/bin/firefox (pid 1234, user alice)".
    var described: String {
        let who = UserDatabase.userName(uid) ?? "uid \(uid)"
        if startedByRun { return "\(program ?? "a program"), run by \(who)," }
        return "\(program ?? "a program whose executable is unknown") (pid \(pid), user \(who))"
    }

    /// Reads who asks for the request `peer` sent, now. The peer's program is read again
    /// (same process: its start time; same executable as at accept), so a process that
    /// connected as one program and runs another now is not trusted as either. `cliPaths`:
    /// where the devaccess CLI is installed (`RequestSettings.cliPaths`).
    static func identify(_ peer: Peer, cliPaths: [String]) -> Requester {
        var requester = Requester(pid: peer.pid, uid: peer.uid, program: peer.program)
        guard let connected = peer.identity else {
            requester.untrusted = Self.notTrusted(peer.programProblem ?? "the program could not be read when it connected")
            return requester
        }
        let now: ProgramIdentity
        switch ProgramIdentity.read(pid: peer.pid, startedAt: connected.startTime) {
        case .success(let read): now = read
        case .failure(let problem):
            requester.untrusted = Self.notTrusted(problem.description)
            return requester
        }
        if let flaw = connected.untrusted ?? now.untrusted {
            requester.untrusted = Self.notTrusted(flaw)
            return requester
        }
        guard now.executable == connected.executable, now.path == connected.path else {
            requester.program = now.path
            requester.untrusted = Self.notTrusted("the process connected as \(connected.path) and runs \(now.path) now")
            return requester
        }
        // Only a trusted CLI stands for its parent: code preloaded into it could ask anything.
        guard cliPaths.contains(now.path) else { return requester }
        requester.cli = Carrier(path: now.path, pid: peer.pid)
        return parent(of: now, cli: requester)
    }

    /// The CLI's parent as the requester. A parent that has exited leaves nothing to name:
    /// the CLI was reparented (to init or a subreaper), which did not ask.
    private static func parent(of cli: ProgramIdentity, cli carrier: Requester) -> Requester {
        var requester = carrier
        requester.program = nil
        let gone = "the program that ran devaccess (pid \(cli.parent)) has exited"
        guard cli.parent > 1 else {
            requester.untrusted = Self.notTrusted(gone)
            return requester
        }
        requester.pid = cli.parent
        let pidfd = devaccess_pidfd_open(cli.parent, 0)
        guard pidfd >= 0 else {
            requester.untrusted = Self.notTrusted(gone)
            return requester
        }
        let pin = FileDescriptor(owning: pidfd)
        // The pidfd is the CLI's parent only if the CLI (the same process) still has that
        // parent now: once the parent exits, the CLI is reparented before the pid is free.
        guard let stat = ProcFile.read(pid: cli.pid, "stat").flatMap(ProcStat.init), stat.startTime == cli.startTime,
              stat.parent == cli.parent else {
            requester.untrusted = Self.notTrusted(gone)
            return requester
        }
        let directory: FileDescriptor
        do {
            directory = try .open("/proc/\(cli.parent)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            requester.untrusted = Self.notTrusted("/proc/\(cli.parent): \(error.errno)")
            return requester
        }
        switch ProgramIdentity.read(pid: cli.parent, directory: directory.rawValue, pinnedBy: pin.rawValue) {
        case .success(let identity):
            requester.program = identity.path
            requester.uid = identity.uid ?? carrier.uid
            requester.untrusted = identity.untrusted.map(Self.notTrusted)
            requester.isShell = Shells.contains(identity.path)
        case .failure(let problem):
            requester.untrusted = Self.notTrusted(problem.description)
        }
        return requester
    }

    static func notTrusted(_ why: String) -> String { "program identity not trusted: \(why)" }
}

/// Login shells: /etc/shells (root's file) plus the usual names, for a system whose
/// /etc/shells leaves one out. Only for wording ("typed at a shell"), never for a decision.
enum Shells {
    static let names: Set<String> = ["sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "busybox"]

    static func contains(_ path: String) -> Bool {
        if let base = path.split(separator: "/").last, names.contains(String(base)) { return true }
        guard let listed = try? String(contentsOfFile: "/etc/shells", encoding: .utf8) else { return false }
        return listed.split(separator: "\n").contains { line in
            let entry = line.trimmingWhitespace()
            return !entry.hasPrefix("#") && (entry == path || realpath(entry) == path)
        }
    }

    private static func realpath(_ path: String) -> String? {
        guard let resolved = Glibc.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
