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
        /// A policy file is there but cannot be read: the call that failed and its errno.
        case unreadable(SystemCallError)
        case notText(String)
        case invalid(PolicyParser.ConfigError)

        public var description: String {
            switch self {
            case .unreadable(let failure): return "cannot read the policy: \(failure)"
            case .notText(let path): return "cannot read \(path): not UTF-8 text"
            case .invalid(let error): return error.description
            }
        }
    }

    /// A missing main file means the built-in defaults (every permission `ask`).
    public static func load(directory: String) throws(LoadError) -> Policy {
        var files: [(path: String, text: String)] = []
        let main = directory + "/" + mainFile
        if let text = try read(main) {
            files.append((main, text))
        }
        let dropIns = directory + "/" + dropInDirectory
        if let names = try? FileManager.default.contentsOfDirectory(atPath: dropIns) {
            for name in names.filter({ $0.hasSuffix(".conf") }).sorted() {
                let path = dropIns + "/" + name
                // Listed a moment ago: gone now is as good as never there.
                if let text = try read(path) { files.append((path, text)) }
            }
        }
        do {
            return try PolicyParser.parse(files)
        } catch {
            throw .invalid(error)
        }
    }

    /// The file's text; nil when open said ENOENT (no file, or a symlink to none): absence is
    /// decided by errno, never guessed. Any other failure keeps its call and errno (EACCES, EISDIR).
    private static func read(_ path: String) throws(LoadError) -> String? {
        let bytes: [UInt8]
        do {
            bytes = try FileDescriptor.contents(of: path)
        } catch {
            if error.function == "open" && error.isNotFound { return nil }
            throw .unreadable(error)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .notText(path) }
        return text
    }
}
