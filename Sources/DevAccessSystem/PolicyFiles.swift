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
    public static func load(directory: String) throws(LoadError) -> Policy {
        var files: [(path: String, text: String)] = []
        let main = directory + "/" + mainFile
        if FileManager.default.fileExists(atPath: main) {
            files.append((main, try read(main)))
        }
        let dropIns = directory + "/" + dropInDirectory
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

    private static func read(_ path: String) throws(LoadError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .unreadable(path, "permission denied or not a regular file")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw .unreadable(path, "not UTF-8 text")
        }
        return text
    }
}
