/// Builds a `Policy` from devaccess.conf and its drop-ins (devaccess.conf(5)).
///
/// ```ini
/// [camera]
/// Default=ask
/// MaxDuration=8h
///
/// [Rule]
/// Permission=camera microphone
/// Group=students
/// Action=deny
/// ```
/// Every error names the file, the line and the problem; nothing is half-applied.
public enum PolicyParser {
    public struct ConfigError: Error, Equatable, CustomStringConvertible {
        public var file: String
        public var line: Int
        public var problem: String
        public var description: String { "\(file):\(line): \(problem)" }
    }

    /// `files` in the order they apply: the main file, then drop-ins sorted by name.
    public static func parse(_ files: [(path: String, text: String)]) throws(ConfigError) -> Policy {
        var policy = Policy()
        for file in files {
            let ini: INIFile
            do {
                ini = try INIFile(parsing: file.text)
            } catch {
                throw ConfigError(file: file.path, line: error.line, problem: error.problem)
            }
            for section in ini.sections {
                try apply(section, file: file.path, to: &policy)
            }
        }
        return policy
    }

    private static func apply(_ section: INIFile.Section, file: String, to policy: inout Policy) throws(ConfigError) {
        if section.name == "Rule" {
            policy.rules.append(try rule(section, file: file))
        } else if section.name == "Program" {
            let declaration = try program(section, file: file)
            policy.programs[declaration.path] = declaration
        } else if let permission = Permission(parsing: section.name), permission.rawValue == section.name {
            var current = policy.defaults[permission] ?? PermissionPolicy.builtIn
            current.origin = PolicyOrigin(file: file, line: section.line)
            for entry in section.entries {
                switch entry.key {
                case "Default": current.action = try action(entry, file: file)
                case "MaxDuration": current.maxDurationSeconds = try duration(entry, file: file)
                case "Keep": current.keepSeconds = try duration(entry, file: file)
                case "MaxAccuracy" where permission == .location:
                    current.maxAccuracy = try accuracy(entry, file: file)
                default:
                    throw unknownKey(entry, in: section, valid: ["Default", "MaxDuration", "Keep"]
                                        + (permission == .location ? ["MaxAccuracy"] : []), file: file)
                }
            }
            policy.defaults[permission] = current
        } else {
            let valid = Permission.all.map { "[\($0.rawValue)]" } + ["[Rule]", "[Program]"]
            throw ConfigError(file: file, line: section.line, problem:
                "unknown section '[\(section.name)]'; valid sections: " + valid.joined(separator: ", "))
        }
    }

    private static func rule(_ section: INIFile.Section, file: String) throws(ConfigError) -> PolicyRule {
        var permissions: Set<Permission> = []
        var users: [String] = [], groups: [String] = [], programs: [String] = []
        var action: PolicyAction?
        var maxDuration: Int64?, keep: Int64?
        var maxAccuracy: LocationAccuracy?, accuracyLine: Int?
        for entry in section.entries {
            let words = entry.value.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            switch entry.key {
            case "Permission":
                for word in words where word != "*" {
                    guard let permission = Permission(parsing: word) else {
                        throw ConfigError(file: file, line: entry.line, problem: "unknown permission '\(word)' in "
                            + "Permission=; valid: " + Permission.all.map(\.rawValue).joined(separator: ", ") + ", *")
                    }
                    permissions.insert(permission)
                }
            case "User": users += words
            case "Group": groups += words
            case "Program":
                for word in words where !word.hasPrefix("/") {
                    throw ConfigError(file: file, line: entry.line,
                                      problem: "Program= needs absolute paths, '\(word)' is not one")
                }
                programs += words
            case "Action": action = try self.action(entry, file: file)
            case "MaxDuration": maxDuration = try duration(entry, file: file)
            case "Keep": keep = try duration(entry, file: file)
            case "MaxAccuracy":
                maxAccuracy = try accuracy(entry, file: file)
                accuracyLine = entry.line
            default:
                throw unknownKey(entry, in: section,
                                 valid: ["Permission", "User", "Group", "Program", "Action", "MaxDuration", "Keep",
                                         "MaxAccuracy"],
                                 file: file)
            }
        }
        guard let action else {
            throw ConfigError(file: file, line: section.line, problem: "[Rule] has no Action= line")
        }
        if let accuracyLine, maxAccuracy != nil, !permissions.isEmpty, !permissions.contains(.location) {
            // A cap that could never apply is a mistake worth naming, not a rule to keep quietly.
            throw ConfigError(file: file, line: accuracyLine, problem: "MaxAccuracy= caps location, but this rule is "
                + "for " + permissions.sorted().map(\.rawValue).joined(separator: " ") + " only; add location to "
                + "Permission= or move MaxAccuracy= to a location rule")
        }
        return PolicyRule(permissions: permissions, users: users, groups: groups, programs: programs,
                          action: action, maxDurationSeconds: maxDuration, keepSeconds: keep, maxAccuracy: maxAccuracy,
                          origin: PolicyOrigin(file: file, line: section.line))
    }

    /// `[Program]`: `Path=` (absolute) and `Permissions=` (what `devaccess run PATH` asks for).
    private static func program(_ section: INIFile.Section, file: String) throws(ConfigError) -> ProgramDeclaration {
        var path: String?
        var permissions: [Permission] = []
        for entry in section.entries {
            switch entry.key {
            case "Path":
                guard entry.value.hasPrefix("/"), !entry.value.contains(" ") else {
                    throw ConfigError(file: file, line: entry.line,
                                      problem: "Path= needs one absolute path, '\(entry.value)' is not one")
                }
                path = entry.value
            case "Permissions":
                for word in entry.value.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init) {
                    guard let permission = Permission(parsing: word) else {
                        throw ConfigError(file: file, line: entry.line, problem: "unknown permission '\(word)' in "
                            + "Permissions=; valid: " + Permission.all.map(\.rawValue).joined(separator: ", "))
                    }
                    if !permissions.contains(permission) { permissions.append(permission) }
                }
            default:
                throw unknownKey(entry, in: section, valid: ["Path", "Permissions"], file: file)
            }
        }
        guard let path else { throw ConfigError(file: file, line: section.line, problem: "[Program] has no Path= line") }
        guard !permissions.isEmpty else {
            throw ConfigError(file: file, line: section.line, problem: "[Program] has no Permissions= line")
        }
        return ProgramDeclaration(path: path, permissions: permissions,
                                  origin: PolicyOrigin(file: file, line: section.line))
    }

    private static func action(_ entry: INIFile.Entry, file: String) throws(ConfigError) -> PolicyAction {
        guard let action = PolicyAction(rawValue: entry.value) else {
            throw ConfigError(file: file, line: entry.line, problem: "'\(entry.value)' is not an action for "
                + "\(entry.key)=; valid: " + PolicyAction.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return action
    }

    /// A location accuracy level; an empty value resets to "no cap", as in systemd.
    private static func accuracy(_ entry: INIFile.Entry, file: String) throws(ConfigError) -> LocationAccuracy? {
        if entry.value.isEmpty { return nil }
        do {
            return try LocationAccuracy.parse(entry.value)
        } catch {
            throw ConfigError(file: file, line: entry.line, problem: "\(entry.key)=: \(error.description)")
        }
    }

    /// An empty value resets to "no limit", as in systemd.
    private static func duration(_ entry: INIFile.Entry, file: String) throws(ConfigError) -> Int64? {
        if entry.value.isEmpty { return nil }
        do {
            return try DurationText.seconds(entry.value)
        } catch {
            throw ConfigError(file: file, line: entry.line, problem: "\(entry.key)=: \(error.description)")
        }
    }

    private static func unknownKey(_ entry: INIFile.Entry, in section: INIFile.Section, valid: [String],
                                   file: String) -> ConfigError {
        ConfigError(file: file, line: entry.line, problem: "unknown key '\(entry.key)' in [\(section.name)]; valid: "
            + valid.joined(separator: ", "))
    }
}
