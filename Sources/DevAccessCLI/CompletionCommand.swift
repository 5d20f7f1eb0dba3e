import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessEngine

/// `devaccess completion bash|zsh|fish`: a completion script made from the command table
/// (`DevAccessCLI.commands`), so a new command or option completes without anyone editing
/// three shell scripts. scripts/install.sh installs all three.
enum CompletionCommand: Command {
    static let words = OptionSpec(long: "words", short: nil, value: "KIND",
                                  help: "Print the words the scripts complete for KIND (devices, pending), one a line.")

    static let spec = CommandSpec(
        name: "completion",
        abstract: "Print a shell completion script for bash, zsh or fish.",
        usage: "devaccess completion bash|zsh|fish",
        options: [words],
        discussion: """
        Commands, options, permission names, accuracy levels, formats and user names are
        completed; device ids (--device) and pending request ids (approve, reject, withdraw)
        are asked of devaccess when the completion runs. To try one without installing:
          source <(devaccess completion bash)
          devaccess completion fish | source
        scripts/install.sh installs them where each shell looks (bash-completion, zsh's
        site-functions, fish's vendor_completions.d).
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        if let kind = arguments.value("words") {
            guard arguments.positionals.isEmpty else {
                throw UsageError(message: "--words takes no shell", command: spec.name)
            }
            console.out(try await Self.dynamicWords(kind, environment: arguments.environment).joined(separator: "\n"))
            return .success
        }
        guard arguments.positionals.count == 1, let shell = Shell(rawValue: arguments.positionals[0]) else {
            throw UsageError(message: "name one shell: bash, zsh or fish", command: spec.name)
        }
        console.out(CompletionScript.make(for: shell, commands: DevAccessCLI.commands.map(\.spec)))
        return .success
    }

    enum Shell: String, CaseIterable {
        case bash, zsh, fish
    }

    /// Device ids from the same probe `devices` uses; pending ids from devaccessd. Nothing
    /// (not an error) when they cannot be had: a completion must never print a complaint.
    /// Letters, digits and `:._@+#=/-` only: nothing a shell expands, quotes or splits.
    static func isPlainWord(_ word: String) -> Bool {
        !word.isEmpty && word.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || Array(":._@+#=/-".utf8).contains(byte)
        }
    }

    static func dynamicWords(_ kind: String, environment: ProcessEnvironment) async throws -> [String] {
        switch kind {
        case "devices":
            let reports = (try? await EngineReads(EngineReads.Settings(), environment: environment)
                .devices(Permission.all)) ?? []
            // Ids a shell may take as words: a gpsd receiver's id holds what the program on
            // gpsd's port said its path was, and anyone may listen there when gpsd does not.
            return reports.flatMap { $0.devices.map(\.id) }.filter(Self.isPlainWord)
        case "pending":
            guard let session = try? BrokerSession(socketPath: BrokerOptions.configuredSocketPath(environment),
                                                          timeout: .seconds(2)), let pending = try? session.pending() else { return [] }
            return pending.requests.map { String($0.pending) }
        default:
            throw UsageError(message: "'\(kind)' is not a kind of words (devices, pending)", command: spec.name)
        }
    }
}

/// The scripts themselves. Each option's completion comes from its placeholder: USER a
/// user name, LEVEL an accuracy, PERMISSION a permission, FORMAT a report format, WHEN a
/// --color choice, ID a
/// device id, PATH/FILE/DIR a file; other values (durations, text) are left to the person.
enum CompletionScript {
    /// What a command's positional arguments are.
    enum Positional {
        case permissions, switchWords, pendingID, program, policy, none
    }

    static func positional(_ command: String) -> Positional {
        switch command {
        case "status", "explain", "check", "devices", "who", "request", "grant", "deny", "revoke", "reset": return .permissions
        case "switch": return .switchWords
        case "approve", "reject", "withdraw": return .pendingID
        case "run": return .program
        case "policy": return .policy
        default: return .none
        }
    }

    enum Value {
        case users, levels, permissions, formats, colorChoices, devices, files, directories, none
    }

    static func value(_ placeholder: String?) -> Value? {
        switch placeholder {
        case nil: return nil
        case "USER", "U": return .users
        case "LEVEL": return .levels
        case "PERMISSION", "P": return .permissions
        case "FORMAT": return .formats
        case "WHEN": return .colorChoices
        case "ID": return .devices
        case "PATH", "FILE", "PROGRAM": return .files
        case "DIR": return .directories
        default: return Value.none
        }
    }

    static let permissions = Permission.all.map(\.rawValue)
    static let levels = LocationAccuracy.allCases.reversed().map(\.rawValue)
    static let formats = ["table", "json", "csv", "html"]

    static func make(for shell: CompletionCommand.Shell, commands: [CommandSpec]) -> String {
        switch shell {
        case .bash: return bash(commands)
        case .zsh: return zsh(commands)
        case .fish: return fish(commands)
        }
    }

    private static func words(_ value: Value) -> [String] {
        switch value {
        case .levels: return levels
        case .permissions: return permissions
        case .formats: return formats
        case .colorChoices: return ["auto", "always", "never"]
        default: return []
        }
    }

    private static func positionalWords(_ positional: Positional) -> [String] {
        switch positional {
        case .permissions: return permissions
        case .switchWords: return permissions + ["on", "off"]
        case .policy: return ["check"]
        default: return []
        }
    }

    // MARK: bash

    static func bash(_ commands: [CommandSpec]) -> String {
        var script = """
            # bash completion for devaccess; generated by 'devaccess completion bash'.
            # Words that come from the machine (device ids, pending ids) are matched here, never
            # through compgen -W: it expands $(...) in its words, and a device id can come from
            # whoever answers on gpsd's port.
            _devaccess_matching() {
                local word
                while IFS= read -r word; do
                    [[ $word == "$1"* ]] && COMPREPLY+=("$word")
                done
            }
            _devaccess() {
                local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} i
                if [ "$COMP_CWORD" -eq 1 ]; then
                    COMPREPLY=($(compgen -W "\(commands.map(\.name).joined(separator: " ")) help --help --version" -- "$cur"))
                    return
                fi
                local command=${COMP_WORDS[1]}
                for ((i = 2; i < COMP_CWORD; i++)); do
                    if [ "${COMP_WORDS[i]}" = -- ]; then
                        [ "$command" = run ] && mapfile -t COMPREPLY < <(compgen -c -- "$cur")
                        return
                    fi
                done
                local options= words=

            """
        script += "    case \"$command\" in\n"
        for command in commands {
            script += "        \(command.name))\n"
            for option in command.allOptions {
                guard let value = value(option.value) else { continue }
                let flag = "--" + option.long
                script += "            if [ \"$prev\" = \(flag) ]; then "
                switch value {
                case .users: script += "mapfile -t COMPREPLY < <(compgen -u -- \"$cur\"); return; fi\n"
                case .files: script += "mapfile -t COMPREPLY < <(compgen -f -- \"$cur\"); return; fi\n"
                case .directories: script += "mapfile -t COMPREPLY < <(compgen -d -- \"$cur\"); return; fi\n"
                case .devices:
                    script += "COMPREPLY=(); _devaccess_matching \"$cur\" < <(devaccess completion --words devices 2>/dev/null); return; fi\n"
                case .none: script += "return; fi\n"
                default:
                    script += "COMPREPLY=($(compgen -W \"\(words(value).joined(separator: " "))\" -- \"$cur\")); return; fi\n"
                }
            }
            let flags = command.allOptions.map { "--" + $0.long }
            script += "            options=\"\(flags.joined(separator: " "))\"\n"
            switch positional(command.name) {
            case .pendingID:
                script += "            [[ $cur != -* ]] && { COMPREPLY=(); _devaccess_matching \"$cur\" < <(devaccess completion --words pending 2>/dev/null); return; }\n"
            case .program:
                script += "            [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -c -- \"$cur\"); return; }\n"
            case let other:
                let words = positionalWords(other)
                if !words.isEmpty { script += "            words=\"\(words.joined(separator: " "))\"\n" }
            }
            script += "            ;;\n"
        }
        script += """
                esac
                if [[ $cur == -* ]]; then
                    COMPREPLY=($(compgen -W "$options" -- "$cur"))
                else
                    COMPREPLY=($(compgen -W "$words" -- "$cur"))
                fi
            }
            complete -F _devaccess devaccess

            """
        return script
    }

    // MARK: zsh

    static func zsh(_ commands: [CommandSpec]) -> String {
        var script = """
            #compdef devaccess
            # zsh completion for devaccess; generated by 'devaccess completion zsh'.
            _devaccess() {
              local -a commands
              commands=(

            """
        for command in commands {
            script += "    \(quoteZsh(command.name + ":" + command.abstract))\n"
        }
        script += """
              )
              if (( CURRENT == 2 )); then
                _describe -t commands 'devaccess command' commands
                return
              fi
              local command=${words[2]}
              local -a arguments
              case $command in

            """
        script += commands.map(zshArm).joined()
        script += """
              esac
              shift words
              (( CURRENT-- ))
              _arguments -s $arguments
            }
            if [ "$funcstack[1]" = _devaccess ]; then
              _devaccess "$@"
            else
              compdef _devaccess devaccess
            fi

            """
        return script
    }

    /// One command's arm of the `case`: its options' specs and its positional arguments'.
    private static func zshArm(_ command: CommandSpec) -> String {
        var arm = "    \(command.name))\n      arguments=(\n"
        for option in command.allOptions {
            arm += "        \(quoteZsh(zshSpec(option)))\n"
        }
        if let positional = zshPositional(command) {
            arm += "        \(quoteZsh(positional))\n"
        }
        return arm + "      )\n      ;;\n"
    }

    /// `--long[help]:value:action` for `_arguments`.
    private static func zshSpec(_ option: OptionSpec) -> String {
        let help = option.help.replacing("]", with: ")").replacing("[", with: "(")
        var spec = "--" + option.long + "[" + help + "]"
        guard let value = value(option.value) else { return spec }
        spec += ":" + (option.value ?? "value").lowercased() + ":"
        switch value {
        case .users: spec += "_users"
        case .files: spec += "_files"
        case .directories: spec += "_files -/"
        case .devices: spec += "{compadd -- ${(f)\"$(devaccess completion --words devices 2>/dev/null)\"}}"
        case .none: spec += " "
        default: spec += "(" + words(value).joined(separator: " ") + ")"
        }
        return spec
    }

    /// The spec of a command's positional arguments, if it has any to offer.
    private static func zshPositional(_ command: CommandSpec) -> String? {
        switch positional(command.name) {
        case .pendingID:
            return "*:request id:{compadd -- ${(f)\"$(devaccess completion --words pending 2>/dev/null)\"}}"
        case .program:
            return "*::program:_normal"
        case let other:
            let words = positionalWords(other)
            return words.isEmpty ? nil : "*:argument:(" + words.joined(separator: " ") + ")"
        }
    }

    private static func quoteZsh(_ text: String) -> String {
        "'" + text.replacing("'", with: "'\\''") + "'"
    }

    // MARK: fish

    static func fish(_ commands: [CommandSpec]) -> String {
        let names = commands.map(\.name).joined(separator: " ")
        var script = """
            # fish completion for devaccess; generated by 'devaccess completion fish'.
            complete -c devaccess -f
            complete -c devaccess -n "not __fish_seen_subcommand_from \(names)" -l version -d 'Print the version'

            """
        for command in commands {
            script += "complete -c devaccess -n \"not __fish_seen_subcommand_from \(names)\" -a \(command.name) -d "
                + quoteFish(command.abstract) + "\n"
        }
        for command in commands {
            let when = "-n \"__fish_seen_subcommand_from \(command.name)\""
            for option in command.allOptions {
                var line = "complete -c devaccess \(when) -l \(option.long)"
                if let short = option.short { line += " -s \(short)" }
                if let value = value(option.value) {
                    switch value {
                    // -x: takes a value, and no file names unless asked (-F).
                    case .users: line += " -x -a '(__fish_complete_users)'"
                    case .files: line += " -r -F"
                    case .directories: line += " -x -a '(__fish_complete_directories)'"
                    case .devices: line += " -x -a '(devaccess completion --words devices 2>/dev/null)'"
                    case .none: line += " -x"
                    default: line += " -x -a " + quoteFish(words(value).joined(separator: " "))
                    }
                }
                script += line + " -d " + quoteFish(option.help) + "\n"
            }
            switch positional(command.name) {
            case .pendingID:
                script += "complete -c devaccess \(when) -a '(devaccess completion --words pending 2>/dev/null)'\n"
            case .program:
                script += "complete -c devaccess \(when) -a '(__fish_complete_subcommand --fcs-skip=2)'\n"
            case let other:
                let words = positionalWords(other)
                if !words.isEmpty { script += "complete -c devaccess \(when) -a " + quoteFish(words.joined(separator: " ")) + "\n" }
            }
        }
        return script
    }

    private static func quoteFish(_ text: String) -> String {
        "'" + text.replacing("\\", with: "\\\\").replacing("'", with: "\\'") + "'"
    }
}
