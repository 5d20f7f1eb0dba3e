import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessInterface
import DevAccessSystem
import FoundationEssentials
import Glibc

/// `devaccess run`: devaccessd starts PROGRAM as the caller with access to the permissions
/// asked for, for that program tree only. This process relays: the caller's streams go to
/// the broker as descriptors, signals go as `run-signal`s, and it exits with the program's
/// status.
enum RunCommand: Command {
    static let camera = OptionSpec(long: "camera", short: nil, value: nil, help: "Give the program the camera.")
    static let microphone = OptionSpec(long: "microphone", short: nil, value: nil,
                                       help: "Give the program the microphone.")
    static let location = OptionSpec(long: "location", short: nil, value: nil,
        help: "Give the program this computer's location, through devaccessd's gpsd endpoint.")
    static let strict = OptionSpec(long: "strict", short: nil, value: nil,
        help: "Also keep the program from the capture devices it is not given, even where your groups open them.")
    static let once = OptionSpec(long: "once", short: nil, value: nil,
                                 help: "Ask for this run only (the default when a decision is needed).")

    static let spec = CommandSpec(
        name: "run",
        abstract: "Run a program with the camera, microphone or location: only that program tree gets them.",
        usage: "devaccess run [--camera] [--microphone] [--location [--accuracy LEVEL]] [--reason TEXT] "
            + "[--once | --for DURATION | --always] [--strict] [--] PROGRAM [ARGUMENT...]",
        options: [camera, microphone, location, RequestCommand.accuracy, RequestCommand.reason, once,
                  RequestCommand.forDuration, RequestCommand.always, strict, BrokerOptions.socket],
        discussion: """
        devaccessd starts PROGRAM itself, as you (your uid, gid and groups) plus one group id
        of the run's own; the device nodes of the permissions it is given get an ACL entry for
        that id while the run lasts. Your other programs do not get them, and a process the
        program leaves behind loses them when the run ends.
        --location: devaccessd's gpsd endpoint serves the program's connections at the run's
        level (--accuracy, default exact, as for 'devaccess request location'): a connection
        only the run's processes hold. Where the gpsd redirect rule is loaded, a plain
        connection to gpsd (127.0.0.1:2947) arrives there; otherwise point the program at
        devaccessd's port (947: 'gpspipe -w 127.0.0.1:947'). No environment variable is set:
        gpsd's clients read none for the server.
        Without --camera, --microphone and --location, the program gets what a [Program]
        section of the policy declares for it (devaccess.conf(5)); without one, that is an
        error.
        The decision is about PROGRAM run by you: an earlier decision for the program (or
        for you), the policy (Program= rules match root's own files), or consent asked on
        your login terminal: "Allow /usr/bin/cheese, run by alice, to use the camera?".
        --once (the default) lasts for this run; --for and --always record a grant for the
        program that later runs use without asking, for a program only root can change (in
        /usr/bin, say); any other program (one you could change or swap) gets this run only.
        PROGRAM is looked up in PATH. Arguments and the environment are passed on, except
        variables that could load other code into it (LD_PRELOAD, GCONV_PATH, PYTHONPATH...;
        see devaccess(1)). Standard input, output and error are yours; Ctrl-C, Ctrl-Z, a
        window size change and signals sent to devaccess reach the program. The program runs
        outside your terminal's session: it has no controlling terminal (/dev/tty).
        --strict: the program also cannot open the capture nodes of what it was not given
        (--camera alone: no microphone), even where your groups (video, audio) or ACL
        entries would open them (Landlock; it also sets no_new_privs, so setuid programs
        run inside do not gain privileges).
        Exit status: the program's (128+N when a signal N ended it); when it did not start:
        77 a permission was refused or not decided, 69 devaccessd unreachable, 64 usage, 1
        another error (the message says which).
        Examples:
          devaccess run --camera -- cheese
          devaccess run --camera --for 8h -- v4l2-ctl -d /dev/video0 --stream-mmap
          devaccess run --microphone -- arecord -d 5 take.wav
          devaccess run --location --accuracy city -- gpspipe -w -n 5
        """, positionalEndsOptions: true)

    /// The signals relayed to the program. Ctrl-Z (SIGTSTP) stops the program, then this
    /// process; `fg` continues both.
    static let relayed: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT, SIGWINCH, SIGUSR1, SIGUSR2,
                                   SIGALRM]

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let order = try order(arguments)
        let path = try BrokerOptions.socketPath(arguments, command: spec.name)
        let conversation = RunTerminal(path: path, signals: SignalPipe.install(relayed), console: console)
        let broker: any DevAccessInterface = BrokerInterface(socketPath: path, timeout: .seconds(30))
        let outcome: RunOutcome
        do {
            outcome = try await broker.run(order, streams: .inherited, conversation: conversation)
        } catch .badArgument where order.permissions.isEmpty {
            throw UsageError(message: "name what \(order.program) gets (--camera, --microphone, --location): no "
                + "[Program] section of the policy declares it; nothing was run", command: spec.name)
        } catch {
            throw RequestCommand.failure(error)
        }
        return try ended(outcome, program: order.program, console: console)
    }

    /// The program's exit status thrown as a `ProgramExit`, or the code when it was not run.
    static func ended(_ outcome: RunOutcome, program: String, console: Console) throws -> ExitCode {
        switch outcome {
        case .ended(let ended):
            throw ProgramExit(status: ended.exit.shellStatus)
        case .notRun(let decision):
            let time = HumanTime.now()
            for result in decision.results {
                console.error("devaccess: \(result.permission.rawValue): "
                    + TerminalText.block(time.rewritingISOTimes(in: result.message)))
            }
            console.error("devaccess: \(program) was not run")
            return .noPermission
        case .stopped:
            return .failure
        }
    }

    /// The permissions asked for and the location accuracy, checked against each other.
    static func permissions(_ arguments: ParsedArguments) throws -> ([Permission], LocationAccuracy?) {
        var permissions: [Permission] = []
        if arguments.has("camera") { permissions.append(.camera) }
        if arguments.has("microphone") { permissions.append(.microphone) }
        if arguments.has("location") { permissions.append(.location) }
        guard let text = arguments.value("accuracy") else { return (permissions, nil) }
        guard permissions.contains(.location) else {
            throw UsageError(message: "'--accuracy' goes with --location", command: spec.name)
        }
        do {
            return (permissions, try LocationAccuracy.parse(text))
        } catch {
            throw UsageError(message: "--accuracy: \(error.description)", command: spec.name)
        }
    }

    /// What devaccessd is asked to run, from the command line and this process's state.
    static func order(_ arguments: ParsedArguments) throws -> RunOrder {
        let (permissions, accuracy) = try permissions(arguments)
        guard let name = arguments.positionals.first else {
            throw UsageError(message: "missing PROGRAM", command: spec.name)
        }
        let text = arguments.value("reason")
        if let text, text.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: spec.name)
        }
        let scope = try RequestCommand.requestedScope(arguments)
        let program = try resolve(name, path: arguments.environment["PATH"])
        // The program's environment is built from this process's as it is now (LaunchEnvironment
        // removes and sets what it must): what is passed on, not configuration read.
        return RunOrder(program: program, arguments: arguments.positionals,
                        environment: ProcessEnvironment.currentEntries(),
                        directory: FileManager.default.currentDirectoryPath, umask: currentUmask(),
                        permissions: permissions, reason: text, scope: scope,
                        strict: arguments.has("strict"), accuracy: accuracy)
    }

    /// This command's side of the run: prompts at the caller's terminal, signals kept while
    /// the program is not known to run (relayed once it is), or the end.
    final class RunTerminal: RunConversation {
        let path: String
        let signals: SignalPipe?
        let console: Console
        var prompts: PromptSession
        /// Signals that came while asking, relayed once the program runs.
        var early: [Int32] = []

        init(path: String, signals: SignalPipe?, console: Console) {
            self.path = path
            self.signals = signals
            self.console = console
            prompts = PromptSession(signals: signals, console: console)
        }

        var watched: CInt? { signals?.readDescriptor }
        var startLimit: Duration? { .seconds(300) }

        /// devaccessd runs but did not start the program: exit 69 with this sentence alone.
        func limitPassed() -> InterfaceError {
            .brokerBusy("devaccessd at \(path) did not start the program within 300 s")
        }

        /// A signal to this process: relayed while the program runs, kept until it starts when
        /// it does not mean "stop", and otherwise the end (false): leaving withdraws the request,
        /// the broker asks nobody further.
        func watchedIsReady(running: Bool, signals relay: any RunSignals) -> Bool {
            guard let number = signals?.take() else { return true }
            if running {
                RunCommand.relay(number, to: relay)
            } else if RunCommand.keptUntilStarted.contains(number) {
                // The program may have started already, its `run-started` not read yet.
                early.append(number)
            } else {
                signals?.raiseAgain(number)
                return false
            }
            return true
        }

        func prompt(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError) {
            if case .interrupted(let number) = try prompts.show(prompt, line: line) { signals?.raiseAgain(number) }
        }

        func started(_ reply: RunStartedReply, signals relay: any RunSignals) {
            for number in early { RunCommand.relay(number, to: relay) }
            early = []
            // Ends in local time with the time left, as `request` and `list` tell them.
            let time = HumanTime.now()
            for result in reply.results where result.outcome == .granted {
                console.error("devaccess: \(result.permission.rawValue): "
                    + TerminalText.block(time.rewritingISOTimes(in: result.message)))
            }
        }
    }

    /// Signals that do not mean "stop asking": kept while the program is not known to run,
    /// and relayed once it is.
    static let keptUntilStarted: Set<Int32> = [SIGTSTP, SIGCONT, SIGWINCH, SIGUSR1, SIGUSR2, SIGALRM]

    /// The program's exit status, as devaccess's own.
    struct ProgramExit: Error {
        var status: Int32
    }

    /// Sends `number` to the program. Ctrl-Z stops it and then this process, as a shell's
    /// job would stop; SIGCONT (fg) is relayed when it continues us.
    static func relay(_ number: Int32, to program: any RunSignals) {
        program.relay(number)
        if number == SIGTSTP { raise(SIGSTOP) }
    }

    /// PROGRAM as exec would find it: a path with a slash as given (made absolute), else the
    /// first executable regular file of that name in `path` (PATH as `devaccess` started
    /// with; unset: /usr/local/bin:/usr/bin:/bin).
    static func resolve(_ name: String, path: String?) throws -> String {
        if name.contains("/") {
            let absolute = name.hasPrefix("/") ? name : FileManager.default.currentDirectoryPath + "/" + name
            guard access(absolute, X_OK) == 0 else {
                let failure = SystemCallError.current("access", path: absolute)
                throw CommandFailure(message: "\(failure); nothing was run",
                                     code: failure.isNotFound ? .programNotFound : .cannotExecute)
            }
            return absolute
        }
        let search = path ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in search.split(separator: ":", omittingEmptySubsequences: false) {
            let base = directory.isEmpty ? "." : String(directory)
            let candidate = (base.hasPrefix("/") ? base : FileManager.default.currentDirectoryPath + "/" + base)
                + "/" + name
            var info = stat()
            if stat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        throw CommandFailure(message: "\(name): not found in PATH; nothing was run", code: .programNotFound)
    }

    static func currentUmask() -> UInt32 {
        let mask = umask(0o022)
        umask(mask)
        return UInt32(mask)
    }
}
