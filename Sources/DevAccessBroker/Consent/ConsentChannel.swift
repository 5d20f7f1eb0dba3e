import FoundationEssentials
import Glibc
import CLinux
import CSystemd
import DevAccessCore
import DevAccessSystem

/// Where a person can say yes or no without the requesting program being able to answer
/// for them (docs/security.md, "Consent").
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
        /// The device node itself (devpts instance and inode): the same number can name a
        /// terminal of another devpts instance (a user namespace's).
        var node: FileKey
        /// The session the requester must stay in (the login's), when known.
        var session: Int32?
    }

    /// Why there is no trusted channel; said to the user and recorded.
    struct Unavailable: Error, Sendable, Hashable {
        var reason: String
    }

    /// Root's login program, which stays the leader of the session it makes on Debian
    /// (shadow's login) and holds the terminal open for the session's life.
    static let loginPrograms: Set<String> = ["/usr/bin/login", "/bin/login"]

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
        let (major, minor) = numbers(tty)
        if let problem = kindProblem(major: major, minor: minor) {
            return .failure(Unavailable(reason: problem))
        }
        if let problem = check(path, owner: uid, device: tty) { return .failure(Unavailable(reason: problem)) }
        guard let node = node(path), holds(pid, node) else {
            return .failure(Unavailable(reason: "the requesting process does not have \(path) open (it does not run "
                + "on its session's terminal)"))
        }
        return .success(Terminal(path: path, source: "logind session \(String(cString: session))", node: node,
                                 session: nil))
    }

    /// The controlling terminal of the requester's login, trusted only when everything
    /// that could be bent by a program of the user is checked against what root holds:
    /// - the leader of the requester's terminal session is root's `login` itself (a
    ///   session whose leader is the user's own process, for instance the login shell
    ///   that made itself a session on a pseudo-terminal it holds, is refused);
    /// - that login holds the very terminal node open (device and inode, so a terminal
    ///   with the same number in another devpts instance does not pass);
    /// - the requester has the same node open, and it is the requester's controlling
    ///   terminal (same number).
    /// Logins by sshd are not recognised yet (the shell leads that session): they fall
    /// back to the password.
    private static func loginLeaderTerminal(of pid: Int32, session: UInt32, tty: UInt64,
                                            user: UserIdentity) -> Result<Terminal, Unavailable> {
        let refusal = Unavailable(reason: "the requesting process does not run on the terminal of a login made by "
            + "root's login (it was started from another terminal, a terminal emulator, ssh, or a pseudo-terminal "
            + "of its own)")
        guard let requester = ProcFile.stat(of: pid), requester.session > 1,
              let leader = ProcFile.stat(of: requester.session), leader.tty == tty,
              ProcFile.auditID(pid: requester.session, "sessionid") == session,
              let own = ProcFile.ownerAndProgram(requester.session), own.uid == 0, loginPrograms.contains(own.program)
        else { return .failure(refusal) }
        let (major, minor) = numbers(tty)
        guard let path = devicePath(major: major, minor: minor) else {
            return .failure(Unavailable(reason: "the login terminal (device \(major):\(minor)) is not a "
                + "pseudo-terminal or console this broker knows"))
        }
        if let problem = kindProblem(major: major, minor: minor) {
            return .failure(Unavailable(reason: problem))
        }
        if let problem = check(path, owner: user.uid, device: tty) {
            return .failure(Unavailable(reason: problem))
        }
        guard let node = node(path) else { return .failure(refusal) }
        guard holds(requester.session, node) else {
            return .failure(Unavailable(reason: "root's login (pid \(requester.session)) does not hold \(path) open"))
        }
        guard holds(pid, node) else {
            return .failure(Unavailable(reason: "the requesting process does not have \(path) open (it does not run "
                + "on the login's terminal)"))
        }
        return .success(Terminal(path: path, source: "login pid \(requester.session) (session leader), audit session "
            + "\(session)", node: node, session: requester.session))
    }

    /// The device node at `path` (not following a symlink).
    static func node(_ path: String) -> FileKey? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Whether process `pid` has `node` open on one of its first descriptors (a login and a
    /// program run on a terminal have it on 0, 1 or 2; a few more are looked at).
    static func holds(_ pid: Int32, _ node: FileKey) -> Bool {
        (0..<16).contains { fd in
            (try? CharacterDevice.at("/proc/\(pid)/fd/\(fd)", following: true))?.node == node
        }
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

    /// Major and minor of a device number in the kernel's encoding (/proc/PID/stat tty_nr).
    static func numbers(_ device: UInt64) -> (major: UInt32, minor: UInt32) {
        (UInt32((device >> 8) & 0xfff), UInt32((device & 0xff) | ((device >> 12) & 0xfff00)))
    }

    /// Terminals whose input their user can feed without a person: a serial line (its owner
    /// can switch the UART to loopback, TIOCM_LOOP, so the question comes back as input) and
    /// a virtual console before Linux 6.7 (TIOCLINUX pastes a selection as input).
    static func kindProblem(major: UInt32, minor: UInt32) -> String? {
        guard major == 4 else { return nil }
        if minor >= 64 {
            return "a serial line's user can loop its output back as input (TIOCM_LOOP), so an answer there may not "
                + "come from a person"
        }
        return consoleInjection()
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
        let found: CharacterDevice?
        do {
            found = try CharacterDevice.at(path)
        } catch {
            return "\(path): \(error.errno)"
        }
        guard let found else { return "\(path) is not a terminal device" }
        guard found.number == device else { return "\(path) is not the login's controlling terminal" }
        guard found.owner == uid else { return "\(path) belongs to uid \(found.owner), not the requesting user" }
        return nil
    }
}
