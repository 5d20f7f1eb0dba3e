import Foundation
import Glibc
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
///
/// The terminal is never taken from a record someone wrote (utmp lines can be forged with
/// the setgid `utempter`): it is the controlling terminal of the login's session leader,
/// the requester's ancestor whose parent is root's `login` (or sshd's session process
/// under root's sshd), and the requester must have that same controlling terminal.
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

    /// Root programs that make logins and hold the terminal's other side.
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
        guard let requester = ProcFile.stat(of: peer.pid), requester.tty != 0 else {
            return .failure(Unavailable(reason: "the requesting process has no controlling terminal"))
        }
        if sd_booted() > 0, let terminal = logindTerminal(pid: peer.pid, uid: peer.uid, tty: requester.tty) {
            return terminal
        }
        return loginLeaderTerminal(of: peer.pid, session: session, tty: requester.tty, user: user)
    }

    /// Why terminal input can be forged on this machine, or nil when it cannot.
    static func injection(setting path: String = TerminalInjection.setting) -> String? {
        TerminalInjection.problem(setting: path)
    }

    /// logind's session of the peer and its TTY (text logins only; a graphical session
    /// has none, and a desktop agent is for later).
    private static func logindTerminal(pid: Int32, uid: UInt32, tty: UInt64) -> Result<Terminal, Unavailable>? {
        var session: UnsafeMutablePointer<CChar>?
        guard sd_pid_get_session(pid, &session) >= 0, let session else { return nil }
        defer { free(session) }
        var owner: uid_t = 0
        guard sd_session_get_uid(session, &owner) >= 0, owner == uid else { return nil }
        var name: UnsafeMutablePointer<CChar>?
        guard sd_session_get_tty(session, &name) >= 0, let name else {
            return .failure(Unavailable(reason: "logind session \(String(cString: session)) has no terminal "
                + "(a graphical session: a desktop consent agent is not available yet)"))
        }
        defer { free(name) }
        let path = "/dev/" + String(cString: name)
        if let problem = check(path, owner: uid, device: tty) { return .failure(Unavailable(reason: problem)) }
        return .success(Terminal(path: path, source: "logind session \(String(cString: session))"))
    }

    /// The controlling terminal of the requester's login: the leader of the requester's
    /// terminal session must be root's `login` (Debian's login stays the session leader and
    /// runs the shell as its child), or a process whose parent is root's `login` or sshd's
    /// per-session process (where the shell itself calls setsid), in the same audit session,
    /// on the same controlling terminal. A program that makes a session of its own (setsid,
    /// a pty of its own) leads it itself, under no login, and loses this terminal.
    private static func loginLeaderTerminal(of pid: Int32, session: UInt32, tty: UInt64,
                                            user: UserIdentity) -> Result<Terminal, Unavailable> {
        let refusal = Unavailable(reason: "the requesting process does not run on the terminal of a login made by "
            + "root's login or sshd (it was started from another terminal, a terminal emulator or a pseudo-terminal "
            + "of its own)")
        guard let requester = ProcFile.stat(of: pid), requester.session > 1,
              let leader = ProcFile.stat(of: requester.session), leader.tty == tty,
              ProcFile.auditID(pid: requester.session, "sessionid") == session else { return .failure(refusal) }
        let login: String
        if let own = ProcFile.ownerAndProgram(requester.session), own.uid == 0, loginPrograms.contains(own.program) {
            login = URL(fileURLWithPath: own.program).lastPathComponent + " pid \(requester.session) (session leader)"
        } else if let parent = loginParent(of: leader.parent) {
            login = parent + " pid \(leader.parent), session leader \(requester.session)"
        } else {
            return .failure(refusal)
        }
        let (major, minor) = (UInt32((tty >> 8) & 0xfff), UInt32((tty & 0xff) | ((tty >> 12) & 0xfff00)))
        guard let path = devicePath(major: major, minor: minor) else {
            return .failure(Unavailable(reason: "the login terminal (device \(major):\(minor)) is not a "
                + "pseudo-terminal or console this broker knows"))
        }
        if major == 4 && minor < 64, let problem = consoleInjection() {
            return .failure(Unavailable(reason: problem))
        }
        if let problem = check(path, owner: user.uid, device: tty) {
            return .failure(Unavailable(reason: problem))
        }
        return .success(Terminal(path: path, source: "\(login), audit session \(session)"))
    }

    /// "login" or "sshd" when `pid` is root's login program (or sshd's per-session process,
    /// which runs as the user, under root's sshd).
    private static func loginParent(of pid: Int32) -> String? {
        guard pid > 1, let process = ProcFile.ownerAndProgram(pid), loginPrograms.contains(process.program) else {
            return nil
        }
        let name = URL(fileURLWithPath: process.program).lastPathComponent
        if process.uid == 0 { return name }
        guard name == "sshd", let parent = ProcFile.stat(of: pid)?.parent, parent > 1,
              let above = ProcFile.ownerAndProgram(parent), above.uid == 0, above.program == process.program else {
            return nil
        }
        return "sshd"
    }

    /// /dev path of a terminal device: Unix98 pseudo-terminals (majors 136-143), virtual
    /// consoles (4:1-63) and serial lines (4:64-255).
    static func devicePath(major: UInt32, minor: UInt32) -> String? {
        switch major {
        case 136...143: return "/dev/pts/\((major - 136) * 256 + minor)"
        case 4 where (1..<64).contains(minor): return "/dev/tty\(minor)"
        case 4 where minor >= 64: return "/dev/ttyS\(minor - 64)"
        default: return nil
        }
    }

    /// Before Linux 6.7, TIOCLINUX could paste a selection into a virtual console as input,
    /// even with TIOCSTI off.
    static func consoleInjection() -> String? {
        var names = utsname()
        guard uname(&names) == 0 else { return "cannot tell the kernel version" }
        let release = withUnsafeBytes(of: names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard parts.count == 2 else { return "cannot tell the kernel version from '\(release)'" }
        if parts[0] > 6 || (parts[0] == 6 && parts[1] >= 7) { return nil }
        return "Linux \(release) lets programs paste input into a virtual console (TIOCLINUX, limited from 6.7)"
    }

    /// A terminal is a character device (not a symlink) that login gave to the user, and
    /// the very device the processes have as their controlling terminal.
    static func check(_ path: String, owner uid: UInt32, device: UInt64) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return "\(path): \(Errno.current)" }
        guard info.st_mode & S_IFMT == S_IFCHR else { return "\(path) is not a terminal device" }
        guard UInt64(info.st_rdev) == device else { return "\(path) is not the login's controlling terminal" }
        guard info.st_uid == uid else { return "\(path) belongs to uid \(info.st_uid), not the requesting user" }
        return nil
    }
}
