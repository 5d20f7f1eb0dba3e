/// The environment a process started with, as a value: read once by each executable's
/// `main` (`ProcessEnvironment.current()`, DevAccessSystem) and passed down in options and
/// settings, so no library code reads variables of its own. Tests build one from a literal.
/// docs/environment.md lists every variable and who reads it.
public struct ProcessEnvironment: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    public var values: [String: String]

    public init(_ values: [String: String] = [:]) {
        self.values = values
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        var values: [String: String] = [:]
        for (name, value) in elements where values[name] == nil { values[name] = value }
        self.values = values
    }

    /// `NAME=value` entries as `environ` holds them. A name given twice keeps its first
    /// value (glibc's getenv finds the first); an entry without `=` is skipped.
    public init(entries: [String]) {
        var values: [String: String] = [:]
        for entry in entries {
            guard let equals = entry.firstIndex(of: "=") else { continue }
            let name = String(entry[..<equals])
            if values[name] == nil { values[name] = String(entry[entry.index(after: equals)...]) }
        }
        self.values = values
    }

    /// The value of `name`, nil when unset (set but empty is "").
    public subscript(name: String) -> String? { values[name] }

    /// The value of `name` when set and not empty.
    public func nonEmpty(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    /// The project's variables (docs/environment.md).
    public enum Name {
        public static let stateDirectory = "DEVACCESS_STATE_DIR"
        public static let configDirectory = "DEVACCESS_CONFIG_DIR"
        public static let socket = "DEVACCESS_SOCKET"
        public static let gpsd = "DEVACCESS_GPSD"
        public static let promptTimeout = "DEVACCESS_PROMPT_TIMEOUT"
        public static let pager = "DEVACCESS_PAGER"
        public static let statusCache = "DEVACCESSD_STATUS_CACHE"
        /// DEBUG builds only (tests): see docs/environment.md.
        public static let testDevices = "DEVACCESS_TEST_DEVICES"
        public static let testCrashAt = "DEVACCESS_TEST_CRASH_AT"
        public static let testPAMService = "DEVACCESS_TEST_PAM_SERVICE"
        public static let testAuditWindow = "DEVACCESS_TEST_AUDIT_WINDOW"
        public static let testInotifyFail = "DEVACCESS_TEST_INOTIFY_FAIL"
        public static let testEnforcerFail = "DEVACCESS_TEST_ENFORCER_FAIL"
    }

    /// `DEVACCESS_STATE_DIR` when set and not empty.
    public var stateDirectory: String? { nonEmpty(Name.stateDirectory) }
    /// `DEVACCESS_CONFIG_DIR` when set and not empty.
    public var configDirectory: String? { nonEmpty(Name.configDirectory) }
    /// `DEVACCESS_SOCKET` when set and not empty.
    public var socketPath: String? { nonEmpty(Name.socket) }
    /// `DEVACCESS_GPSD` as set (`GpsdEndpoint.fromEnvironment` parses it).
    public var gpsd: String? { values[Name.gpsd] }
    /// False when `DEVACCESSD_STATUS_CACHE=off`: devaccessd reads every status afresh.
    public var keepsStatusInputs: Bool { values[Name.statusCache] != "off" }
}
