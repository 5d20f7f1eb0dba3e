import DevAccessCore
import FoundationEssentials
import Glibc

/// Reads the policy from disk: `devaccess.conf` and the drop-ins `conf.d/*.conf`,
/// applied in that order (drop-ins sorted by file name).
public enum PolicyFiles {
    public static let systemDirectory = "/etc/devaccess"
    /// The main file and the drop-in directory inside the configuration directory.
    public static let mainFile = "devaccess.conf"
    public static let dropInDirectory = "conf.d"
    /// A policy is a few KiB; a file that grows without end is not one.
    static let sizeLimit = 16 << 20

    /// `$DEVACCESS_CONFIG_DIR` when set and not empty (tests, trials), else /etc/devaccess.
    public static func directory(_ environment: ProcessEnvironment) -> String {
        environment.configDirectory ?? systemDirectory
    }

    public enum LoadError: Error, Equatable, CustomStringConvertible {
        /// A policy file is there but cannot be read: the call that failed and its errno.
        case unreadable(SystemCallError)
        /// A policy file or directory read, but not obeyed: why (someone else may have
        /// written it, not a regular file, too large, not UTF-8 text).
        case refused(path: String, why: String)
        case invalid(PolicyParser.ConfigError)

        public var description: String {
            switch self {
            case .unreadable(let failure): return "cannot read the policy: \(failure)"
            case .refused(let path, let why): return "cannot read \(path): \(why)"
            case .invalid(let error): return error.description
            }
        }
    }

    /// A missing main file means the built-in defaults (every permission `ask`).
    ///
    /// Only files that nobody but root (or the reader itself) can have written are read:
    /// the directory, `conf.d` and every file must be owned by root or by the effective
    /// uid and writable by neither group nor others (a sticky directory, like /tmp, may be
    /// writable: others can add their own files there, which are refused, but not replace
    /// or remove root's). Otherwise the policy is not read, as when a file does not parse:
    /// devaccessd keeps the last good policy and says why. A `conf.d` anyone can write lets
    /// any user add `Default=allow` or delete a deny, and devaccessd, which decides, would
    /// obey it (the hostile review of 2026-12-01); sudo and sshd refuse such files for the
    /// same reason.
    public static func load(directory: String) throws(LoadError) -> Policy {
        try checkDirectory(directory)
        var files: [(path: String, text: String)] = []
        let main = directory + "/" + mainFile
        if let text = try read(main) {
            files.append((main, text))
        }
        let dropIns = directory + "/" + dropInDirectory
        try checkDirectory(dropIns)
        for name in try dropInNames(dropIns) {
            let path = dropIns + "/" + name
            // Listed a moment ago: gone now is as good as never there.
            if let text = try read(path) { files.append((path, text)) }
        }
        do {
            return try PolicyParser.parse(files)
        } catch {
            throw .invalid(error)
        }
    }

    /// Why a file or directory with this owner and mode may have been written by someone
    /// other than root or the reader; nil when it may not.
    static func writableByOthers(owner: uid_t, mode: mode_t) -> String? {
        if owner != 0 && owner != geteuid() {
            return "owned by uid \(owner); the policy is read only from files root alone can write"
        }
        let isDirectory = mode & S_IFMT == S_IFDIR
        if mode & 0o022 != 0 && !(isDirectory && mode & S_ISVTX != 0) {
            return "writable by its group or others (mode \(String(UInt32(mode) & 0o7777, radix: 8))); "
                + "the policy is read only from files root alone can write: chmod go-w"
        }
        return nil
    }

    /// The `.conf` names in `conf.d`, sorted; none when it is not there. A `conf.d` that
    /// cannot be listed (EMFILE, EACCES, not a directory) fails the load: a drop-in that
    /// denies must never vanish from the policy because its directory could not be read.
    public static func dropInNames(_ dropIns: String) throws(LoadError) -> [String] {
        do {
            return try DirectoryListing.names(dropIns).filter { $0.hasSuffix(".conf") }.sorted()
        } catch {
            if error.isNotFound { return [] }
            throw .unreadable(error)
        }
    }

    /// A directory that is not there is fine (no policy there); one someone else can write is not.
    private static func checkDirectory(_ path: String) throws(LoadError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let failure = SystemCallError.current("stat", path: path)
            if failure.isNotFound { return }
            throw .unreadable(failure)
        }
        if let flaw = writableByOthers(owner: info.st_uid, mode: info.st_mode) { throw .refused(path: path, why: flaw) }
    }

    /// The file's text, checked and read through one descriptor (what is checked is what is
    /// read); nil when open said ENOENT (no file, or a symlink to none): absence is decided by
    /// errno, never guessed. Any other failure keeps its call and errno (EACCES, EISDIR).
    private static func read(_ path: String) throws(LoadError) -> String? {
        let bytes: [UInt8]
        do {
            let file = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
            var info = stat()
            try SystemCall.check("fstat", path: path) { fstat(file.rawValue, &info) }
            guard info.st_mode & S_IFMT == S_IFREG else { throw LoadError.refused(path: path, why: "not a regular file") }
            if let flaw = writableByOthers(owner: info.st_uid, mode: info.st_mode) {
                throw LoadError.refused(path: path, why: flaw)
            }
            bytes = try file.contents(path: path, limit: sizeLimit + 1)
        } catch let error as LoadError {
            throw error
        } catch let error as SystemCallError {
            if error.function == "open" && error.isNotFound { return nil }
            throw .unreadable(error)
        } catch {
            throw .refused(path: path, why: "\(error)")
        }
        guard bytes.count <= sizeLimit else { throw .refused(path: path, why: "larger than 16 MiB") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .refused(path: path, why: "not UTF-8 text") }
        return text
    }
}
