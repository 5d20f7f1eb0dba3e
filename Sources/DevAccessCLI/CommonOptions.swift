import DevAccessArguments
import DevAccessCore
import DevAccessEngine
import DevAccessSystem
import Glibc

/// Options several commands share, and turning their text into typed values.
enum CommonOptions {
    static let user = OptionSpec(long: "user", short: "u", value: "USER",
                                 help: "Evaluate for this user name or uid (default: you).")
    static let json = OptionSpec(long: "json", short: nil, value: nil,
                                 help: "Print JSON (schema in docs/json.md) instead of a table.")
    static let verbose = OptionSpec(long: "verbose", short: "v", value: nil,
                                    help: "Also every node's reason, and the nodes that are no device of the permission.")
    static let gpsd = OptionSpec(long: "gpsd", short: nil, value: "HOST:PORT",
                                 help: "Where gpsd listens (default: $DEVACCESS_GPSD or 127.0.0.1:2947).")
    static let gpsdTimeout = OptionSpec(long: "gpsd-timeout", short: nil, value: "MS",
                                        help: "Give up on gpsd after MS milliseconds (default: 500).")

    static let stateDir = OptionSpec(long: "state-dir", short: nil, value: "DIR",
                                     help: "Ledger directory (default: $DEVACCESS_STATE_DIR or /var/lib/devaccess).")

    /// `--state-dir`, else `$DEVACCESS_STATE_DIR`, else `/var/lib/devaccess`.
    static func stateDirectory(_ arguments: ParsedArguments, command: String) throws(UsageError) -> String {
        guard let text = arguments.value("state-dir") else {
            return EngineVocabulary.stateDirectory(arguments.environment)
        }
        guard !text.isEmpty, !text.contains("\0") else {
            throw UsageError(message: "'--state-dir' needs a directory", command: command)
        }
        return text
    }

    static let permissionsHelp = "PERMISSION is one of: "
        + Permission.all.map(\.rawValue).joined(separator: ", ") + "."

    /// The user named by --user, or the caller (from the kernel: getuid()).
    static func identity(_ arguments: ParsedArguments, command: String) throws -> UserIdentity {
        do {
            if let text = arguments.value("user") {
                return try UserDatabase.identity(for: text)
            }
            return try UserDatabase.identity(uid: getuid())
        } catch {
            switch error {
            case .noSuchUser, .invalidUID, .noSuchUID:
                throw UsageError(message: error.description, command: command)
            case .lookupFailed:
                throw CommandFailure(message: error.description)
            }
        }
    }

    static func permissions(_ words: [String], command: String) throws(UsageError) -> [Permission] {
        if words.isEmpty { return Permission.all }
        var result: [Permission] = []
        for word in words {
            guard let permission = Permission(parsing: word) else {
                let names = Permission.all.map(\.rawValue)
                throw UsageError(message: "unknown permission '\(word)'"
                    + ArgumentParser.suggestion(word.lowercased(), among: names)
                    + "; valid: " + names.joined(separator: ", "), command: command)
            }
            if !result.contains(permission) { result.append(permission) }
        }
        return result
    }

    /// The engine's reads here (no devaccessd): the ledger directory, the policy, gpsd.
    static func reads(_ arguments: ParsedArguments, command: String) throws -> EngineReads {
        var settings = EngineReads.Settings(stateDirectory: try stateDirectory(arguments, command: command),
                                            policyDirectory: PolicyFiles.directory(arguments.environment),
                                            gpsd: arguments.value("gpsd"))
        if let text = arguments.value("gpsd-timeout") {
            guard let ms = Int(text), ms > 0, ms <= 60_000 else {
                throw UsageError(message: "'\(text)' is not a timeout in milliseconds (1...60000) for '--gpsd-timeout'",
                                 command: command)
            }
            settings.gpsdTimeout = .milliseconds(ms)
        }
        return EngineReads(settings, environment: arguments.environment)
    }
}
