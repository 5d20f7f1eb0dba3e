import DevAccessArguments
import DevAccessCore
import Glibc
import DevAccessSystem

/// The `devaccess` command: picks the subcommand, runs it, maps every outcome to
/// a documented exit code. Data goes to stdout, messages to stderr.
public enum DevAccessCLI {
    public static let version = "0.1.0"

    static let commands: [CommandEntry] = [
        CommandEntry(spec: StatusCommand.spec, run: StatusCommand.run),
        CommandEntry(spec: ExplainCommand.spec, run: ExplainCommand.run),
        CommandEntry(spec: CheckCommand.spec, run: CheckCommand.run),
        CommandEntry(spec: DevicesCommand.spec, run: DevicesCommand.run),
        CommandEntry(spec: MonitorCommand.spec, run: MonitorCommand.run),
        CommandEntry(spec: WhoCommand.spec, run: WhoCommand.run),
        CommandEntry(spec: RequestCommand.spec, run: RequestCommand.run),
        CommandEntry(spec: RunCommand.spec, run: RunCommand.run),
        CommandEntry(spec: PendingCommand.spec, run: PendingCommand.run),
        CommandEntry(spec: ApproveCommand.spec, run: ApproveCommand.run),
        CommandEntry(spec: RejectCommand.spec, run: RejectCommand.run),
        CommandEntry(spec: WithdrawCommand.spec, run: WithdrawCommand.run),
        CommandEntry(spec: GrantCommand.spec, run: GrantCommand.run),
        CommandEntry(spec: DenyCommand.spec, run: DenyCommand.run),
        CommandEntry(spec: RevokeCommand.spec, run: RevokeCommand.run),
        CommandEntry(spec: ResetCommand.spec, run: ResetCommand.run),
        CommandEntry(spec: ListCommand.spec, run: ListCommand.run),
        CommandEntry(spec: ReconcileCommand.spec, run: ReconcileCommand.run),
        CommandEntry(spec: SwitchCommand.spec, run: SwitchCommand.run),
        CommandEntry(spec: LocationCommand.spec, run: LocationCommand.run),
        CommandEntry(spec: AuditCommand.spec, run: AuditCommand.run),
        CommandEntry(spec: PolicyCommand.spec, run: PolicyCommand.run),
        CommandEntry(spec: DoctorCommand.spec, run: DoctorCommand.run),
        CommandEntry(spec: CompletionCommand.spec, run: CompletionCommand.run),
    ]

    /// `environment`: read once by `devaccess`'s main; commands find it in their
    /// `ParsedArguments` (docs/environment.md).
    public static func main(_ arguments: [String], environment: ProcessEnvironment) async -> Int32 {
        let console = Console()
        do {
            return try await run(arguments, environment: environment, console: console).rawValue
        } catch let error as UsageError {
            console.error("devaccess: \(error.message)")
            let help = error.command.map { "devaccess \($0) --help" } ?? "devaccess --help"
            console.error("See '\(help)' for usage.")
            return ExitCode.usage.rawValue
        } catch let exit as RunCommand.ProgramExit {
            return exit.status
        } catch let error as CommandFailure {
            console.error("devaccess: \(error.message)")
            return error.code.rawValue
        } catch {
            console.error("devaccess: internal error: \(error)")
            return ExitCode.failure.rawValue
        }
    }

    static func run(_ arguments: [String], environment: ProcessEnvironment = ProcessEnvironment(),
                    console: Console) async throws -> ExitCode {
        guard let first = arguments.first else {
            console.out(topLevelHelp)
            return .usage
        }
        switch first {
        case "-h", "--help", "help":
            if first == "help", arguments.count > 1, let command = lookup(arguments[1]) {
                console.out(command.spec.helpText)
            } else {
                console.out(topLevelHelp)
            }
            return .success
        case "--version", "version":
            console.out("devaccess \(version)")
            return .success
        default:
            break
        }
        guard let command = lookup(first) else {
            let names = commands.map(\.spec.name)
            throw UsageError(message: "unknown command '\(first)'"
                + ArgumentParser.suggestion(first, among: names)
                + "; commands: " + names.joined(separator: ", "), command: nil)
        }
        let parsed = try ArgumentParser.parse(Array(arguments.dropFirst()), for: command.spec,
                                              environment: environment)
        if parsed.has("help") {
            console.out(command.spec.helpText)
            return .success
        }
        return try await command.run(parsed, console)
    }

    static func lookup(_ name: String) -> CommandEntry? {
        commands.first { $0.spec.name == name }
    }

    static var topLevelHelp: String {
        var text = """
        devaccess \(version) - consent and access control for cameras, microphones and location

        Usage: devaccess COMMAND [OPTIONS]

        Commands:

        """
        for command in commands {
            text += "  " + command.spec.name.padded(to: 11)
                + command.spec.abstract + "\n"
        }
        text += """

        Run 'devaccess COMMAND --help' for the options of a command, 'devaccess --version'
        for the version.
        Exit codes: 0 success/authorized, 1 error, 2 limited, 3 denied, 4 notDetermined,
        5 restricted, 6 unavailable, 64 usage error, 65 audit chain broken, 74 ledger unusable,
        69 broker unreachable, 75 ledger busy, 77 refused. See devaccess(1).
        """
        return text
    }
}

/// A subcommand: its spec (for parsing and help) and what it does.
protocol Command {
    static var spec: CommandSpec { get }
    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode
}

struct CommandEntry: Sendable {
    var spec: CommandSpec
    var run: @Sendable (ParsedArguments, Console) async throws -> ExitCode
}

/// A failure with a sentence for people and the exit code it maps to.
struct CommandFailure: Error {
    var message: String
    var code: ExitCode = .failure
}

/// stdout for data, stderr for messages, written straight to the descriptors so
/// that `monitor` lines reach a pipe as they are printed.
struct Console: Sendable {
    func out(_ text: String) {
        // Device names come from hardware, reasons and paths from users: shown, never sent.
        write(STDOUT_FILENO, TerminalText.block(text.hasSuffix("\n") ? text : text + "\n"))
    }

    func error(_ text: String) {
        write(STDERR_FILENO, TerminalText.block(text + "\n"))
    }

    /// Text whose spans StyledText already made safe, with the colours `style` allows.
    func out(_ text: StyledText, style: OutputStyle) {
        let rendered = text.rendered(style)
        write(STDOUT_FILENO, rendered.hasSuffix("\n") ? rendered : rendered + "\n")
    }

    private func write(_ fd: CInt, _ text: String) {
        FileDescriptor.writeAll(fd, text)  // EPIPE and friends: the reader is gone, nothing to tell it.
    }
}
