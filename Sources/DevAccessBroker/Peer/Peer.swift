import FoundationEssentials
import Glibc
import CSystemd
import DevAccessSystem
import DevAccessProtocol
import DevAccessEngine

/// Who is on the other end of a connection, as the kernel says: never from a message.
///
/// - uid, gid, pid: `SO_PEERCRED` (the credentials at `connect()` time).
/// - groups: `SO_PEERGROUPS` (the supplementary groups of the connecting process).
/// - program: `/proc/PID/exe`, read while the connection is open and pinned to the
///   connecting process through a pidfd (`SO_PEERPIDFD`, else `pidfd_open(pid)`):
///   open `/proc/PID`, read `exe` (and the rest of `ProgramIdentity`) relative to it,
///   then check the pidfd's process is still alive (so the pid was not recycled and
///   the directory was that process's).
public struct Peer: Sendable, Hashable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public var groups: [UInt32]
    /// The executable the peer ran when the broker accepted it; nil with `programProblem`.
    public var program: String?
    public var programProblem: String?
    /// The program and whether it may be named by its executable, read at accept: a
    /// request compares it with a reading of its own (`Requester`).
    public var identity: ProgramIdentity?
    /// How the pid was pinned: `SO_PEERPIDFD` or `pidfd_open`.
    public var pidfdSource: String?
    /// The peer's /proc/PID, opened at accept and checked against the pidfd there, held for
    /// the connection: later reads (a run's resource limits) are the peer's or fail once it
    /// is gone, never another process's that got its pid. nil with `programProblem`.
    public var process: PinnedProcess?
    /// The audit login session (`/proc/PID/sessionid`) and login uid (`loginuid`) the
    /// kernel keeps for the peer: set by `pam_loginuid` at login, inherited by every
    /// descendant, never changed by an unprivileged process. nil: not in a login session.
    public var sessionID: UInt32?
    public var loginUID: UInt32?
    /// The programs above the peer, nearest first ("bash (pid 812)"), for prompts and the
    /// audit: the CLI is rarely what really asks. Read by the request path (not at accept:
    /// most connections only ask a status), not pinned.
    public var ancestry: [String] = []
    /// Whom the peer's use of devaccessd's limits and budgets is charged to: its uid, or for
    /// a subordinate uid of /etc/subuid (a user namespace of a user's own) that user's.
    public var accountable: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32], program: String? = nil,
                programProblem: String? = nil, pidfdSource: String? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.program = program
        self.programProblem = programProblem
        self.pidfdSource = pidfdSource
        accountable = SubordinateIDs.accountable(uid)
    }

    /// The credentials the judge identifies the caller by (`Caller.identified`).
    public var credentials: Caller.Credentials {
        Caller.Credentials(uid: uid, gid: gid, groups: groups)
    }

    /// Whether the peer's process credentials hold `gid` (primary or supplementary).
    public func isMember(of gid: UInt32) -> Bool {
        self.gid == gid || groups.contains(gid)
    }

    /// Reads the identity of the process connected on `fd`. Fails only when
    /// `SO_PEERCRED` does (then nothing about the peer is known and it is turned away).
    public static func identify(socket fd: CInt) -> Result<Peer, Errno> {
        var credentials = devaccess_ucred()
        var length = socklen_t(MemoryLayout<devaccess_ucred>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
            return .failure(Errno.current)
        }
        var peer = Peer(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: peerGroups(fd))
        identifyProgram(&peer, socket: fd)
        return .success(peer)
    }

    private static func peerGroups(_ fd: CInt) -> [UInt32] {
        var count = 64
        while count <= 65536 {
            var groups = [gid_t](repeating: 0, count: count)
            var length = socklen_t(count * MemoryLayout<gid_t>.size)
            if getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, &groups, &length) == 0 {
                return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size))
            }
            // ERANGE: `length` now holds the size needed.
            guard errno == ERANGE else { return [] }
            count = max(count * 2, Int(length) / MemoryLayout<gid_t>.size)
        }
        return []
    }

    private static func identifyProgram(_ peer: inout Peer, socket fd: CInt) {
        guard peer.pid > 0 else {
            peer.programProblem = "the peer's pid is not visible in the broker's pid namespace"
            return
        }
        var pidfd: CInt = -1
        var length = socklen_t(MemoryLayout<CInt>.size)
        if getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0, pidfd >= 0 {
            peer.pidfdSource = "SO_PEERPIDFD"
        } else {
            // Kernels before 6.5: pin the pid now. The process could in theory have exited
            // and its pid been reused since connect(); SO_PEERPIDFD closes that gap.
            pidfd = devaccess_pidfd_open(peer.pid, 0)
            guard pidfd >= 0 else {
                peer.programProblem = "pidfd_open(\(peer.pid)): \(Errno.current) (the peer exited?)"
                return
            }
            peer.pidfdSource = "pidfd_open"
        }
        let pin = FileDescriptor(owning: pidfd)
        guard let pinned = PinnedProcess(pid: peer.pid) else {
            peer.programProblem = "/proc/\(peer.pid): \(Errno.current)"
            return
        }
        let directory = pinned.descriptor
        switch ProgramIdentity.read(pid: peer.pid, directory: directory, pinnedBy: pin.rawValue) {
        case .success(let identity):
            // The pidfd's process was alive after the reads: the directory is the peer's.
            peer.identity = identity
            peer.program = identity.path
            peer.process = pinned
        case .failure(let problem):
            // EACCES when the broker is not root; ENOENT for kernel threads; or the peer exited.
            peer.programProblem = problem.description
            return
        }
        peer.sessionID = ProcFile.auditID(directory, "sessionid")
        peer.loginUID = ProcFile.auditID(directory, "loginuid")
    }

    static func isAlive(_ pidfd: CInt) -> Bool {
        var descriptor = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) == 0
    }
}

/// Small reads from /proc for the peer's login session and its parents.
enum ProcFile {
    /// 4294967295 (-1) means unset.
    static let unset: UInt32 = .max

    /// A whole file (maps, status), read to its end; nil when unreadable or over `limit`.
    static func readAll(_ directory: CInt, _ name: String, limit: Int = 1 << 22) -> String? {
        let fd = openat(directory, name, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        // One byte over the limit is read, so a longer file is told from one of the limit.
        guard let content = try? FileDescriptor(owning: fd).contents(limit: limit + 1), content.count <= limit else {
            return nil
        }
        return String(decoding: content, as: UTF8.self)
    }

    static func read(pid: Int32, _ name: String) -> String? {
        guard let directory = try? FileDescriptor.open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC) else {
            return nil
        }
        return read(directory.rawValue, name)
    }

    /// One read of up to `limit` bytes: a /proc file of one line gives it whole.
    static func read(_ directory: CInt, _ name: String, limit: Int = 4096) -> String? {
        let fd = openat(directory, name, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        let file = FileDescriptor(owning: fd)
        var buffer = [UInt8](repeating: 0, count: limit)
        guard case .success(let count) = valueOrErrno({ Glibc.read(file.rawValue, &buffer, buffer.count) }) else {
            return nil
        }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    /// `sessionid` or `loginuid` as a number; nil when unset or unreadable.
    static func auditID(_ directory: CInt, _ name: String) -> UInt32? {
        guard let text = read(directory, name), let value = UInt32(text.trimmingWhitespace()),
              value != unset else { return nil }
        return value
    }

    static func auditID(pid: Int32, _ name: String) -> UInt32? {
        guard let directory = try? FileDescriptor.open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC) else {
            return nil
        }
        return auditID(directory.rawValue, name)
    }

    /// From /proc/PID/stat: the parent, process group, session, the controlling terminal's
    /// device number (kernel encoding) and that terminal's foreground process group.
    struct Stat: Sendable {
        var parent: Int32
        var group: Int32
        var session: Int32
        var tty: UInt64
        var foreground: Int32
    }

    static func stat(of pid: Int32) -> Stat? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the name: state(0) ppid(1) pgrp(2) session(3) tty_nr(4) tpgid(5).
        guard fields.count > 5, let parent = Int32(fields[1]), let group = Int32(fields[2]),
              let session = Int32(fields[3]), let tty = Int64(fields[4]), let foreground = Int32(fields[5])
        else { return nil }
        return Stat(parent: parent, group: group, session: session, tty: UInt64(bitPattern: tty), foreground: foreground)
    }

    /// The owner and executable of a process (nil when it is gone or unreadable).
    static func ownerAndProgram(_ pid: Int32) -> (uid: UInt32, program: String)? {
        var info = Glibc.stat()
        guard lstat("/proc/\(pid)", &info) == 0,
              let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") else { return nil }
        return (info.st_uid, exe)
    }

    /// Up to `depth` ancestors: "name (pid N)", nearest first; stops at pid 1.
    static func ancestry(of pid: Int32, depth: Int = 4) -> [String] {
        var chain: [String] = []
        var current = pid
        while chain.count < depth, let parent = stat(of: current)?.parent, parent > 1 {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink("/proc/\(parent)/exe", &buffer, buffer.count - 1)
            let name = count > 0
                ? String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                : ((try? String(contentsOfFile: "/proc/\(parent)/comm", encoding: .utf8))?
                    .trimmingWhitespace() ?? "?")
            chain.append("\(name) (pid \(parent))")
            current = parent
        }
        return chain
    }
}
