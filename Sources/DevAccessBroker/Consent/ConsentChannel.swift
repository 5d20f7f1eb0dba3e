import Foundation
import Glibc
import Synchronization
import CLinux
import CSystemd
import DevAccessCore
import DevAccessSystem

/// Where a person can say yes or no without the requesting program being able to answer
/// for them (docs/architecture.md, "Consent").
///
/// The requester's own connection proves nothing: any program of the user can speak the
/// protocol, or run the CLI in a pseudo-terminal it controls, and type "allow". What the
/// requester cannot drive is the user's *login terminal*: its input comes from the
/// keyboard through a device whose other side a root process (`login`, `sshd`) holds,
/// unless the kernel lets processes push input into a terminal (`TIOCSTI`), which it
/// does unless `dev.tty.legacy_tiocsti` is 0. The broker (root) writes the question to
/// that terminal and reads the answer from it itself.
enum ConsentChannel {
    /// A terminal the broker may ask on, and how it was found (for the audit).
    struct Terminal: Sendable, Hashable {
        var path: String
        var source: String
    }

    /// Why there is no trusted channel; said to the user and recorded.
    struct Unavailable: Error, Sendable, Hashable {
        var reason: String
    }

    /// Programs that write a login's utmp record as root and own the terminal's other side.
    static let loginPrograms: Set<String> = ["/usr/bin/login", "/bin/login", "/usr/sbin/sshd"]

    /// The login terminal of the peer's session, if the broker can trust it.
    static func terminal(for peer: Peer, user: UserIdentity) -> Result<Terminal, Unavailable> {
        guard let session = peer.sessionID else {
            return .failure(Unavailable(reason: "the requesting process is not in a login session "
                + "(no audit session id: it was not started from a login)"))
        }
        guard peer.loginUID == peer.uid else {
            return .failure(Unavailable(reason: "the requesting process runs as uid \(peer.uid) in a session that uid "
                + "\(peer.loginUID.map(String.init) ?? "?") logged into (su, sudo or setpriv), whose terminal is not "
                + "\(user.name)'s"))
        }
        if let why = injection() { return .failure(Unavailable(reason: why)) }
        if sd_booted() > 0, let terminal = logindTerminal(pid: peer.pid, uid: peer.uid) {
            return terminal
        }
        return utmpTerminal(session: session, user: user)
    }

    /// Why terminal input can be forged on this machine, or nil when it cannot.
    static func injection(setting path: String = TerminalInjection.setting) -> String? {
        TerminalInjection.problem(setting: path)
    }

    /// logind's session of the peer and its TTY (text logins only; a graphical session
    /// has none, and a desktop agent is for later).
    private static func logindTerminal(pid: Int32, uid: UInt32) -> Result<Terminal, Unavailable>? {
        var session: UnsafeMutablePointer<CChar>?
        guard sd_pid_get_session(pid, &session) >= 0, let session else { return nil }
        defer { free(session) }
        var owner: uid_t = 0
        guard sd_session_get_uid(session, &owner) >= 0, owner == uid else { return nil }
        var tty: UnsafeMutablePointer<CChar>?
        guard sd_session_get_tty(session, &tty) >= 0, let tty else {
            return .failure(Unavailable(reason: "logind session \(String(cString: session)) has no terminal "
                + "(a graphical session: a desktop consent agent is not available yet)"))
        }
        defer { free(tty) }
        let path = "/dev/" + String(cString: tty)
        guard let problem = check(path, owner: uid) else {
            return .success(Terminal(path: path, source: "logind session \(String(cString: session))"))
        }
        return .failure(Unavailable(reason: problem))
    }

    /// getutxent's buffer is the C library's, shared by every thread.
    private static let utmpLock = Mutex(())

    /// The terminal of a USER_PROCESS utmp record for `user` that a root-owned `login` or
    /// `sshd` made for this audit session. Debian's login (shadow) writes the record from
    /// the session's shell, so the record's process is the shell (the user's) and its
    /// parent is root's `login`; with sshd the record's process may be sshd itself. A
    /// record written by a terminal emulator (libutempter) names a shell whose parent is
    /// the user's own program, and does not count; nor does a stale one (utmp keeps
    /// records of ended logins where no init cleans them up).
    private static func utmpTerminal(session: UInt32, user: UserIdentity) -> Result<Terminal, Unavailable> {
        let records: [(line: String, pid: Int32)] = utmpLock.withLock { _ in
            var found: [(String, Int32)] = []
            setutxent()
            defer { endutxent() }
            while let entry = getutxent() {
                guard entry.pointee.ut_type == USER_PROCESS else { continue }
                let name = withUnsafeBytes(of: entry.pointee.ut_user) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                guard name == user.name else { continue }
                let line = withUnsafeBytes(of: entry.pointee.ut_line) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                found.append((line, entry.pointee.ut_pid))
            }
            return found
        }
        guard !records.isEmpty else {
            return .failure(Unavailable(reason: "no login of \(user.name) is recorded in utmp (no logind on this "
                + "machine, and login/sshd recorded none)"))
        }
        var seen: [String] = []
        for record in records {
            guard record.pid > 1, ProcFile.auditID(pid: record.pid, "sessionid") == session else {
                seen.append("\(record.line): another login session, or one that ended")
                continue
            }
            guard let login = loginProcess(record.pid) else {
                seen.append("\(record.line): not made by a root login or sshd")
                continue
            }
            guard !record.line.isEmpty, !record.line.contains(".."), !record.line.hasPrefix("/") else { continue }
            let path = "/dev/" + record.line
            if let problem = check(path, owner: user.uid) {
                seen.append(problem)
                continue
            }
            return .success(Terminal(path: path, source: "utmp: \(login.name) pid \(login.pid), session \(session)"))
        }
        return .failure(Unavailable(reason: "no login terminal of this session can be trusted ("
            + seen.joined(separator: "; ") + ")"))
    }

    /// `pid` itself or its parent, when that is a root-owned login program.
    private static func loginProcess(_ pid: Int32) -> (name: String, pid: Int32)? {
        for candidate in [pid, ProcFile.parent(of: pid)].compactMap({ $0 }) where candidate > 1 {
            var info = stat()
            guard stat("/proc/\(candidate)", &info) == 0, info.st_uid == 0 else { continue }
            guard let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(candidate)/exe"),
                  loginPrograms.contains(exe) else { continue }
            return (URL(fileURLWithPath: exe).lastPathComponent, candidate)
        }
        return nil
    }

    /// A terminal is a character device (not a symlink) that login gave to the user.
    static func check(_ path: String, owner uid: UInt32) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return "\(path): \(Errno.current)" }
        guard info.st_mode & S_IFMT == S_IFCHR else { return "\(path) is not a terminal device" }
        guard info.st_uid == uid else { return "\(path) belongs to uid \(info.st_uid), not the requesting user" }
        return nil
    }
}
