import Foundation
import Glibc
import Synchronization

/// A real system user made with `useradd` for one test, removed afterwards.
/// Names are unique per process so parallel tests and reruns never collide.
public final class TestUser: @unchecked Sendable {
    public let name: String
    public let uid: UInt32
    public let gid: UInt32
    public let shell: String
    /// A directory of its own for a user with a login shell (nil otherwise): without one,
    /// `login` warns "No directory, logging in with HOME=/", and `-d /` would hand the
    /// user a home it cannot write (and make a later `userdel -r` remove /).
    public let home: String?
    private let homeDirectory: TemporaryDirectory?

    /// `shell`: "/bin/sh" for users that log in (`LoginTerminal`). `prefix`: the name's
    /// first letters ("hx" for the hostile review's users, so they never collide with the suite's).
    public init(_ tag: String, shell: String = "/usr/sbin/nologin", prefix: String = "da") throws {
        let suffix = String(UInt32(getpid()) % 100_000) + String(UInt32.random(in: 0..<1000))
        // useradd limits names to 32 characters.
        name = String("\(prefix)\(tag)\(suffix)".prefix(31))
        let homeDirectory = shell == "/usr/sbin/nologin" ? nil : try TemporaryDirectory()
        // An explicit uid from a range no test run reuses: useradd -r hands out the uid a
        // just-deleted test user had, and a test still holding that number (or a daemon
        // caching it) would then see another user.
        var made = ProcessOutput(status: -1, stdout: "", stderr: "")
        for _ in 0..<50 {
            let candidate = TestUser.nextUID()
            made = try TestProcess.run("/usr/sbin/useradd", ["-M", "-N", "-u", String(candidate), "-s", shell,
                                                            "-g", "nogroup"]
                                           + (homeDirectory.map { ["-d", $0.path] } ?? []) + [name])
            if made.status != 4 { break }  // 4: uid already in use; take the next one
        }
        guard made.status == 0 else { throw SetupError("useradd \(name): \(made.stderr)") }
        let uidText = try TestProcess.setup("id", ["-u", name]).stdout
        let gidText = try TestProcess.setup("id", ["-g", name]).stdout
        guard let uid = UInt32(uidText.trimmingCharacters(in: .whitespacesAndNewlines)),
              let gid = UInt32(gidText.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw SetupError("cannot read the ids of \(name)")
        }
        if let homeDirectory, chown(homeDirectory.path, uid, gid) != 0 {
            let reason = String(cString: strerror(errno))
            TestProcess.cleanup("userdel", [name])
            throw SetupError("chown \(homeDirectory.path): \(reason)")
        }
        self.uid = uid
        self.gid = gid
        self.shell = shell
        self.home = homeDirectory?.path
        self.homeDirectory = homeDirectory
    }

    /// Sets the user's password (chpasswd), for the PAM checks.
    public func setPassword(_ password: String) throws {
        try TestProcess.setup("chpasswd", [], input: "\(name):\(password)\n")
    }

    /// The user, and pam_faillock's count of its wrong passwords (userdel leaves it).
    deinit {
        TestProcess.cleanup("userdel", [name])
        TestProcess.cleanup("rm", ["-f", "/run/faillock/\(name)"])
    }

    private static let uidCounter = Mutex<UInt32>(0)

    /// 70,000 + a per-process block + a counter: unique within a run, and across concurrent
    /// runs unless two pids share a block (then useradd's check retries). Between the uids
    /// useradd hands out itself (login.defs UID_MAX 60,000) and the subordinate ranges of
    /// /etc/subuid and /etc/subgid (SUB_UID_MIN 100,000), and skipping any uid inside such a
    /// range where an administrator moved them: devaccessd charges a subordinate uid to the
    /// range's owner (docs/security.md, "Limits per person"), and a test user inside
    /// another user's range was refused as that user once a fourth login user existed on the
    /// machine (its range 231072-296607 held the old base of 200,000). Small enough for
    /// `uid * 10` and lastlog's `uid * 292` offset.
    static func nextUID() -> UInt32 {
        let taken = subordinateRanges()
        return uidCounter.withLock { counter in
            var candidate: UInt32 = 0
            for _ in 0..<2_000 {   // the block's every uid at most once
                counter += 1
                candidate = 70_000 + (UInt32(getpid()) % 10) * 2_000 + counter % 2_000
                if !taken.contains(where: { $0.contains(candidate) }) { break }
            }
            return candidate
        }
    }

    /// The uid and gid ranges /etc/subuid and /etc/subgid hand out (`name:first:count` lines).
    static func subordinateRanges() -> [ClosedRange<UInt32>] {
        ["/etc/subuid", "/etc/subgid"].flatMap { file -> [ClosedRange<UInt32>] in
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap { line in
                let fields = line.split(separator: ":", omittingEmptySubsequences: false)
                guard fields.count == 3, let first = UInt32(fields[1]), let count = UInt32(fields[2]), count > 0,
                      first <= UInt32.max - (count - 1) else { return nil }
                return first...(first + count - 1)
            }
        }
    }

    /// Really tries `open()` as this user, with the groups a login would give:
    /// `O_RDONLY` (`<`), `O_WRONLY` (`>>`) or `O_RDWR` (`<>`) from the shell.
    public func canOpen(_ path: String, _ mode: OpenMode) throws -> Bool {
        let result = try TestProcess.run("/usr/bin/setpriv", [
            "--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--",
            "/bin/sh", "-c", "exec 3\(mode.rawValue)\"$1\"", "sh", path,
        ])
        return result.status == 0
    }

    public enum OpenMode: String, Sendable {
        case read = "<"
        case write = ">>"
        case readWrite = "<>"
    }
}

/// A group made with `groupadd` for one test.
public final class TestGroup: @unchecked Sendable {
    public let name: String
    public let gid: UInt32

    public init(_ tag: String, members: [TestUser]) throws {
        name = String("dg\(tag)\(getpid() % 100_000)\(UInt32.random(in: 0..<1000))".prefix(31))
        try TestProcess.setup("groupadd", ["-r", name])
        for member in members {
            try TestProcess.setup("usermod", ["-a", "-G", name, member.name])
        }
        // getent: name:password:GID:members
        let entry = try TestProcess.setup("getent", ["group", name]).stdout.split(separator: ":", omittingEmptySubsequences: false)
        guard entry.count >= 3, let gid = UInt32(entry[2]) else {
            throw SetupError("cannot read the gid of \(name)")
        }
        self.gid = gid
    }

    deinit { TestProcess.cleanup("groupdel", [name]) }
}

public struct SetupError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A directory under /tmp for one test, removed afterwards. Mode 0755 so that the
/// test users can reach the nodes inside.
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    public init() throws {
        var template = Array("/tmp/devaccess-test-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw SetupError("mkdtemp failed") }
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        chmod(path, 0o755)
    }

    deinit { _ = try? FileManager.default.removeItem(atPath: path) }

    /// A character node with /dev/null's numbers (1:3), so that opens really succeed
    /// when permission allows.
    public func makeNullNode(_ name: String, owner: String = "root", group: String = "root",
                             mode: String = "0600") throws -> String {
        let node = "\(path)/\(name)"
        try TestProcess.setup("mknod", ["-m", mode, node, "c", "1", "3"])
        try TestProcess.setup("chown", ["\(owner):\(group)", node])
        return node
    }
}

public let isRoot = getuid() == 0
