import Glibc
import DevAccessSystem
import DevAccessLedger

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

    /// What a grant for this program names: the path alone for root's file (so an upgrade
    /// keeps the grant), path and hash for a file its user could replace.
    var grantProgram: Program { Program(path: path, sha256: trusted ? nil : sha256) }

    enum Problem: Error, CustomStringConvertible {
        case unresolvable(String, Errno)
        case notRegular(String)
        case notExecutable(String)
        case unhashable(String, String)

        var description: String {
            switch self {
            case .unresolvable(let path, let error): return "\(path): \(error); nothing was run"
            case .notRegular(let path): return "\(path) is not a regular file; nothing was run"
            case .notExecutable(let path): return "\(path) is not executable (no x bit); nothing was run"
            case .unhashable(let path, let why):
                return "\(path) could not be hashed (\(why)), and a program its user can change is granted only by "
                    + "its hash; nothing was run"
            }
        }
    }

    /// `path` with symlinks resolved, or as given when it cannot be.
    static func canonical(_ path: String) -> String {
        guard let resolved = Glibc.realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func open(_ requested: String, uid: UInt32) -> Result<RunProgram, Problem> {
        guard let resolved = Glibc.realpath(requested, nil) else {
            return .failure(.unresolvable(requested, Errno.current))
        }
        let path = String(cString: resolved)
        free(resolved)
        // O_PATH first: the path is the user's word, and opening a device node as root has
        // effects (a pty the user made became devaccessd's controlling terminal, a watchdog
        // starts). Only a regular file is opened for reading, through that same inode.
        let located: FileDescriptor
        do {
            located = try FileDescriptor.openPath(path)
        } catch {
            return .failure(.unresolvable(path, error))
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
        // A file its user could change must be hashed, and hashing takes a request thread:
        // not past the limit (checked again while reading: the file may grow meanwhile).
        if flaw != nil && Int64(info.st_size) > ProgramDigest.pinLimit {
            Glibc.close(descriptor)
            return .failure(.unhashable(path, "larger than \(ProgramDigest.pinLimit >> 20) MiB"))
        }
        var sha: String?
        if Int64(info.st_size) <= ProgramDigest.auditLimit || flaw != nil {
            do {
                sha = try ProgramDigest.sha256(descriptor: descriptor)
            } catch {
                if flaw != nil {
                    Glibc.close(descriptor)
                    return .failure(.unhashable(path, error.description))
                }
            }
        }
        return .success(RunProgram(path: path, descriptor: descriptor, untrustedWhy: flaw, sha256: sha))
    }

    func close() { Glibc.close(descriptor) }
}
