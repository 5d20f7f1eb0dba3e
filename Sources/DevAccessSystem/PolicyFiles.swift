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

    /// `$DEVACCESS_CONFIG_DIR` when set and not empty (tests, trials), else /etc/devaccess.
    public static func directory(_ environment: ProcessEnvironment) -> String {
        environment.configDirectory ?? systemDirectory
    }

    public enum LoadError: Error, Equatable, CustomStringConvertible {
        case unreadable(String, String)
        case invalid(PolicyParser.ConfigError)

        public var description: String {
            switch self {
            case .unreadable(let path, let why): return "cannot read \(path): \(why)"
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
    /// or remove root's). Otherwise the policy is `unreadable`, as when a file does not
    /// parse: devaccessd keeps the last good policy and says why. A `conf.d` anyone can
    /// write lets any user add `Default=allow` or delete a deny, and devaccessd, which
    /// decides, would obey it (the hostile review of 2026-12-01); sudo and sshd refuse
    /// such files for the same reason.
    public static func load(directory: String) throws(LoadError) -> Policy {
        var files: [(path: String, text: String)] = []
        try checkDirectory(directory)
        let main = directory + "/" + mainFile
        if FileManager.default.fileExists(atPath: main) {
            files.append((main, try read(main)))
        }
        let dropIns = directory + "/" + dropInDirectory
        if FileManager.default.fileExists(atPath: dropIns) { try checkDirectory(dropIns) }
        if let names = try? FileManager.default.contentsOfDirectory(atPath: dropIns) {
            for name in names.filter({ $0.hasSuffix(".conf") }).sorted() {
                files.append((dropIns + "/" + name, try read(dropIns + "/" + name)))
            }
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

    private static func checkDirectory(_ path: String) throws(LoadError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw .unreadable(path, String(cString: strerror(errno)))
        }
        if let flaw = writableByOthers(owner: info.st_uid, mode: info.st_mode) { throw .unreadable(path, flaw) }
    }

    /// Reads a policy file through one descriptor: what is checked is what is read.
    private static func read(_ path: String) throws(LoadError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { throw .unreadable(path, String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(path, String(cString: strerror(errno))) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .unreadable(path, "not a regular file") }
        if let flaw = writableByOthers(owner: info.st_uid, mode: info.st_mode) { throw .unreadable(path, flaw) }
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(path, String(cString: strerror(errno)))
            }
            if count == 0 { break }
            data.append(contentsOf: chunk[..<count])
            // A policy is a few KiB; a file that grows without end is not one.
            if data.count > 16 << 20 { throw .unreadable(path, "larger than 16 MiB") }
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw .unreadable(path, "not UTF-8 text")
        }
        return text
    }
}
