import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessEnforcement
import DevAccessLedger
import DevAccessInterface

/// The one-writer rule across processes: whoever holds `engine.lock` in the state
/// directory is the only process that writes the ledger and edits ACLs. devaccessd takes
/// it at start and keeps it until it exits (the kernel drops it when the process dies,
/// even on kill -9); root's `--offline` commands take it for their run and are refused
/// while the daemon holds it. The file lives in the private state directory, so no
/// other user can open it, let alone lock it. In a state directory others can write, a
/// user could plant one and hold it: a lock file that is not this user's own regular file
/// is refused as such (hostile review 6: root was told "devaccessd is running").
public final class EngineLock: Sendable {
    public static let fileName = Ledger.engineLockFileName

    public let path: String
    /// Held open, and locked, for as long as this lives (closing it drops the lock).
    private let descriptor: FileDescriptor

    public enum Failure: Error, Sendable, Hashable, CustomStringConvertible {
        /// Another process holds it (the daemon, or another `--offline` run).
        case held(path: String)
        case cannotOpen(path: String, Errno)
        /// Not a regular file of this process's user: planted where others can write.
        case foreign(path: String, owner: uid_t)

        public var description: String {
            switch self {
            case .held(let path):
                return "another process holds the engine lock \(path): devaccessd is running, or another "
                    + "'devaccess --offline' command is"
            case .cannotOpen(let path, let error):
                return "cannot open the engine lock \(path): \(error)"
            case .foreign(let path, let owner):
                return "the engine lock \(path) is not devaccess's own (a file of uid \(owner), or not a regular "
                    + "file): someone else can write the state directory; remove the file and make the directory "
                    + "writable by root alone (chmod 0700)"
            }
        }
    }

    /// Who takes it, written into the file once it is taken: a second devaccessd reads it to
    /// name the running one at once, where it waits for an offline command to finish.
    public enum Holder: String, Sendable {
        case daemon = "devaccessd"
        case offline = "devaccess-offline"
    }

    /// Takes the lock, trying again every 50 ms for up to `wait` (zero: once).
    public init(stateDirectory: String, holder: Holder = .offline, wait: Duration = .zero) throws(Failure) {
        path = stateDirectory + "/" + Self.fileName
        let lock: FileDescriptor
        do {
            lock = try .open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
        } catch {
            throw .cannotOpen(path: path, error.errno)
        }
        let fd = lock.rawValue
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .cannotOpen(path: path, .current) }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else {
            throw .foreign(path: path, owner: info.st_uid)
        }
        let deadline = ContinuousClock.now + wait
        while case .failure(let error) = valueOrErrno({ flock(fd, LOCK_EX | LOCK_NB) }) {
            guard error == .wouldBlock else { throw .cannotOpen(path: path, error) }
            guard ContinuousClock.now < deadline else { throw .held(path: path) }
            usleep(50_000)
        }
        // Its name and pid, and a record lock beside the flock: fcntl(F_GETLK) tells another
        // process the holder's pid, so a name left by an earlier holder is never believed.
        _ = ftruncate(fd, 0)
        _ = FileDescriptor.writeAll(fd, "\(holder.rawValue) \(getpid())\n")
        var record = Self.wholeFile()
        _ = fcntl(fd, F_SETLK, &record)
        descriptor = lock
    }

    /// The pid of the devaccessd that holds the lock now; nil when it is free, or held by
    /// something else (an offline command), or that cannot be told.
    public static func daemonHolding(stateDirectory: String) -> Int32? {
        let path = stateDirectory + "/" + fileName
        // Non-blocking, and only a file of the lock's own kind: a FIFO or another user's file
        // planted in its place names no daemon and cannot hold this open (hostile review 7).
        guard let file = try? FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) else {
            return nil
        }
        var info = stat()
        guard fstat(file.rawValue, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else {
            return nil
        }
        var record = wholeFile()
        guard fcntl(file.rawValue, F_GETLK, &record) == 0, record.l_type != Int16(F_UNLCK), record.l_pid > 0,
              let bytes = try? file.contents(path: path, limit: 64) else { return nil }
        let words = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard words == [Substring(Holder.daemon.rawValue), Substring(String(record.l_pid))] else { return nil }
        return record.l_pid
    }

    /// A write lock on the whole file, as fcntl(2) takes it.
    private static func wholeFile() -> flock {
        var record = flock()
        record.l_type = Int16(F_WRLCK)
        record.l_whence = Int16(SEEK_SET)
        return record
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
