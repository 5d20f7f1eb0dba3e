import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessEnforcement
import DevAccessLedger

/// The one-writer rule across processes: whoever holds `engine.lock` in the state
/// directory is the only process that writes the ledger and edits ACLs. devaccessd takes
/// it at start and keeps it until it exits (the kernel drops it when the process dies,
/// even on kill -9); root's `--offline` commands take it for their run and are refused
/// while the daemon holds it. The file lives in the private state directory, so no
/// other user can open it, let alone lock it.
public final class EngineLock: Sendable {
    public static let fileName = Ledger.engineLockFileName

    public let path: String
    private let descriptor: CInt

    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        /// Another process holds it (the daemon, or another `--offline` run).
        case held(path: String)
        case cannotOpen(path: String, Errno)
        /// The state directory is not one this process can trust.
        case untrusted(path: String, why: String)

        public var description: String {
            switch self {
            case .held(let path):
                return "another process holds the engine lock \(path): devaccessd is running, or another "
                    + "'devaccess --offline' command is"
            case .cannotOpen(let path, let error):
                return "cannot open the engine lock \(path): \(error)"
            case .untrusted(let path, let why):
                return "refusing the state directory \(path): \(why); use a directory only this user owns"
            }
        }
    }

    /// Takes the lock, trying again every 50 ms for up to `wait` (zero: once).
    public init(stateDirectory: String, wait: Duration = .zero) throws(Failure) {
        path = stateDirectory + "/" + Self.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .cannotOpen(path: path, Errno.current) }
        let deadline = ContinuousClock.now + wait
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let error = Errno.current
            guard error.rawValue == EWOULDBLOCK || error.rawValue == EINTR else {
                close(fd)
                throw .cannotOpen(path: path, error)
            }
            guard ContinuousClock.now < deadline else {
                close(fd)
                throw .held(path: path)
            }
            usleep(50_000)
        }
        descriptor = fd
    }

    deinit {
        close(descriptor)
    }
}

/// The engine run in this process, for `--offline`: every operation directly, while the
/// lock is held.
public final class OfflineEngine: EngineRunner {
    public let enforcer: Enforcer
    public let lock: EngineLock

    public init(enforcer: Enforcer, lock: EngineLock) {
        self.enforcer = enforcer
        self.lock = lock
    }

    public func run<R: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport)
    ) async throws(InterfaceError) -> R {
        do {
            return try body(enforcer).0
        } catch {
            throw InterfaceError(error)
        }
    }
}

/// The state directory: private to root (mode 0700), created when missing. The ledger
/// tightens an older, wider directory when it opens it. One that is a symlink or belongs
/// to someone else is refused: whoever owns it could plant a ledger or take the lock.
public enum StateDirectory {
    public static func prepare(_ path: String) throws(EngineLock.Failure) {
        var parts: [String] = []
        for component in path.split(separator: "/") {
            parts.append(String(component))
            let prefix = (path.hasPrefix("/") ? "/" : "") + parts.joined(separator: "/")
            // Only the last one is ours to make private; parents are made as mkdir -p would.
            let mode: mode_t = parts.count == path.split(separator: "/").count ? 0o700 : 0o755
            if mkdir(prefix, mode) != 0 && errno != EEXIST {
                throw .cannotOpen(path: prefix, Errno.current)
            }
        }
        var info = stat()
        guard lstat(path, &info) == 0 else { throw .cannotOpen(path: path, Errno.current) }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw .untrusted(path: path, why: "it is not a directory") }
        guard info.st_uid == geteuid() else {
            throw .untrusted(path: path, why: "it belongs to uid \(info.st_uid), not to uid \(geteuid())")
        }
    }
}
