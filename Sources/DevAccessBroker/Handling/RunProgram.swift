import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessACL

/// The program a `run` names, as devaccessd checked it: the canonical path, the file (open,
/// so the checks and the hash are of one file), whether only root can have put it there
/// (then `Program=` rules and program grants may name it by path), and its SHA-256.
struct RunProgram {
    let path: String
    private let descriptor: CInt
    /// nil: root's file alone; else why not ("owned by uid 1001").
    let untrustedWhy: String?
    let sha256: String?

    var trusted: Bool { untrustedWhy == nil }

    /// What the run is of: path and hash, for matching grants that pin a hash.
    var identity: Program { Program(path: path, sha256: sha256) }

    /// What a grant for this program names: its path (program grants that outlast a run are
    /// recorded only for root's files; an upgrade keeps them). The hash is in the run's record.
    var grantProgram: Program { Program(path: path) }

    enum Problem: Error, CustomStringConvertible {
        /// Missing, or somewhere the user cannot reach: one answer for both, so a run tells the
        /// user nothing about files they could not look at themselves.
        case unreachable(String)
        case unresolvable(String, Errno)
        case notRegular(String)
        case notExecutable(String)

        var description: String {
            switch self {
            case .unreachable(let path):
                return "\(path) is not a program you can run (missing, or in a directory you cannot enter); "
                    + "nothing was run"
            case .unresolvable(let path, let error): return "\(path): \(error); nothing was run"
            case .notRegular(let path): return "\(path) is not a regular file; nothing was run"
            case .notExecutable(let path): return "\(path) is not executable (no x bit); nothing was run"
            }
        }
    }

    static func reachable(_ path: String, by user: UserIdentity) -> Bool {
        guard user.uid != 0 else { return true }
        var directory = path
        while let slash = directory.lastIndex(of: "/"), directory != "/" {
            directory = slash == directory.startIndex ? "/" : String(directory[..<slash])
            guard let facts = try? NodeInspector.inspect(directory), facts.kind == .directory,
                  AccessEvaluator.permits(.execute, on: facts, for: user) else { return false }
        }
        return true
    }


    static func open(_ requested: String, user: UserIdentity) -> Result<RunProgram, Problem> {
        guard let path = CanonicalPath.of(requested) else { return .failure(.unreachable(requested)) }
        // devaccessd resolves as root; before it says anything about the file, the user must be
        // able to reach it: search permission on every directory above it (mode and ACLs, as
        // the kernel checks them for the user's groups). The exec as the user checks again.
        guard reachable(path, by: user) else { return .failure(.unreachable(requested)) }
        // O_PATH first: the path is the user's word, and opening a device node as root has
        // effects (a pty the user made became devaccessd's controlling terminal, a watchdog
        // starts). Only a regular file is opened for reading, through that same inode.
        let located: FileDescriptor
        do {
            located = try FileDescriptor.openPath(path)
        } catch {
            return .failure(.unresolvable(path, error.errno))
        }
        var info = stat()
        guard fstat(located.rawValue, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            return .failure(.notRegular(path))
        }
        guard info.st_mode & 0o111 != 0 else {
            return .failure(.notExecutable(path))
        }
        // O_NONBLOCK, O_NOCTTY: harmless for a regular file, and so for whatever it may be.
        let descriptor = Glibc.open(located.procPath, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else { return .failure(.unresolvable(path, Errno.current)) }
        var checker = RootInstalledFile()
        let flaw = checker.flaw(path, expected: FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
        // The hash is for the audit trail only (no grant is pinned to one: program grants are
        // for root's files). Hashing takes a request thread, so not past the limit, checked
        // again while reading (the file may grow meanwhile); past it the run is audited unhashed.
        var sha: String?
        if Int64(info.st_size) <= ProgramDigest.auditLimit {
            sha = try? ProgramDigest.sha256(descriptor: descriptor, limit: ProgramDigest.auditLimit)
        }
        return .success(RunProgram(path: path, descriptor: descriptor, untrustedWhy: flaw, sha256: sha))
    }

    func close() { Glibc.close(descriptor) }
}
