import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessACL
import DevAccessLaunch

/// The program a `run` names, as devaccessd checked it: opened as the caller (so devaccessd
/// resolves nothing as root, and says nothing about a file the caller could not reach), the
/// canonical path the kernel gives that descriptor, whether only root can have put the file
/// there (then `Program=` rules and program grants may name it by path), and its SHA-256.
/// The run executes this descriptor, not the path: what runs is what was decided for.
struct RunProgram {
    let path: String
    /// `O_PATH`, opened as the caller: the file the run's program is (`execveat`).
    let descriptor: CInt
    /// nil: root's file alone; else why not ("owned by uid 1001").
    let untrustedWhy: String?
    let sha256: String?

    var trusted: Bool { untrustedWhy == nil }

    /// What the run is of: path and hash, for matching grants that pin a hash.
    var identity: Program { Program(path: path, sha256: sha256) }

    /// What a grant for this program names: its path (program grants that outlast a run are
    /// recorded only for root's files; an upgrade keeps them). The hash is in the run's record.
    var grantProgram: Program { Program(path: path) }

    /// Each names the path as the caller gave it and no other: only what the caller wrote.
    enum Problem: Error, CustomStringConvertible {
        /// The caller could not open it (errno as the caller got it).
        case unreachable(String, Errno)
        case directory(String, Errno)
        case unresolvable(String, String)
        case notRegular(String)
        case notExecutable(String)

        var description: String {
            switch self {
            case .unreachable(let path, let error):
                return "\(path) is not a program you can run (\(error.message)); nothing was run"
            case .directory(let directory, let error):
                return "the path is relative and you cannot enter \(directory) (\(error.message)); nothing was run"
            case .unresolvable(let path, let why): return "\(path) could not be checked: \(why); nothing was run"
            case .notRegular(let path): return "\(path) is not a regular file; nothing was run"
            case .notExecutable(let path): return "\(path) is not executable (no x bit); nothing was run"
            }
        }
    }

    /// Opens `requested` as the caller (uid, gid, exactly `groups`; relative to `directory`)
    /// and checks what that descriptor is.
    static func open(_ requested: String, directory: String, uid: UInt32, gid: UInt32,
                     groups: [UInt32]) -> Result<RunProgram, Problem> {
        let located: CInt
        do {
            located = try ProgramLauncher.openAsUser(requested, directory: directory, uid: uid, gid: gid, groups: groups)
        } catch {
            switch error {
            case .refused(let errno): return .failure(.unreachable(requested, errno))
            case .directory(let errno): return .failure(.directory(directory, errno))
            case .failed(let step, let errno):
                return .failure(.unresolvable(requested, "opening it as uid \(uid) failed at \(step.rawValue): \(errno)"))
            }
        }
        switch inspect(located, requested: requested) {
        case .success(let program): return .success(program)
        case .failure(let problem):
            FileDescriptor(owning: located).close()
            return .failure(problem)
        }
    }

    /// Judges the file `located` (the caller's `O_PATH` descriptor): a regular file with an
    /// x bit, named by the path the kernel gives the descriptor, hashed for the audit trail.
    private static func inspect(_ located: CInt, requested: String) -> Result<RunProgram, Problem> {
        var info = stat()
        guard fstat(located, &info) == 0 else { return .failure(.unresolvable(requested, "fstat: \(Errno.current)")) }
        guard info.st_mode & S_IFMT == S_IFREG else { return .failure(.notRegular(requested)) }
        guard info.st_mode & 0o111 != 0 else { return .failure(.notExecutable(requested)) }
        // The caller could read this link as well: the descriptor is one the caller opened.
        let procPath = "/proc/self/fd/\(located)"
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(procPath, &buffer, buffer.count - 1)
        guard count > 0 else { return .failure(.unresolvable(requested, "its path: \(Errno.current)")) }
        let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let key = FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        var checker = RootInstalledFile()
        let flaw = checker.flaw(path, expected: key)
        // The hash is for the audit trail only (no grant is pinned to one: program grants are
        // for root's files). Read through the same file (regular: opening it has no effects).
        // Hashing takes a request thread, so not past the limit, checked again while reading
        // (the file may grow meanwhile); past it the run is audited unhashed.
        var sha: String?
        if Int64(info.st_size) <= ProgramDigest.auditLimit {
            let readable = Glibc.open(procPath, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
            if readable >= 0 {
                let file = FileDescriptor(owning: readable)
                sha = try? ProgramDigest.sha256(descriptor: file.rawValue, limit: ProgramDigest.auditLimit)
            }
        }
        return .success(RunProgram(path: path, descriptor: located, untrustedWhy: flaw, sha256: sha))
    }

    func close() { Glibc.close(descriptor) }
}
