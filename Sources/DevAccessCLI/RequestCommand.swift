import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessSystem
import DevAccessInterface
import FoundationEssentials
import Glibc

/// `devaccess request`: asks devaccessd for permissions for the caller (as the kernel
/// identifies it) and relays the broker's prompts to the caller's own terminal.
enum RequestCommand: Command {
    static let reason = OptionSpec(long: "reason", short: nil, value: "TEXT",
                                   help: "Why you need it; shown to whoever decides (at most 1024 bytes).")
    static let once = OptionSpec(long: "once", short: nil, value: nil,
                                 help: "Ask for as long as the program that ran devaccess (your shell, a script) runs.")
    static let forDuration = OptionSpec(long: "for", short: nil, value: "DURATION",
                                        help: "Ask for this long: 90s, 15m, 8h, 7d, 1h30m.")
    static let always = OptionSpec(long: "always", short: nil, value: nil, help: "Ask until revoked.")
    static let wait = OptionSpec(long: "wait", short: nil, value: nil,
                                 help: "When an administrator must approve, wait for the answer (Ctrl-C stops waiting).")
    static let accuracy = OptionSpec(long: "accuracy", short: nil, value: "LEVEL",
        help: "With location: how precisely to know where this computer is: exact (default), street (~100 m), "
            + "neighborhood (~1 km), city (~10 km), country (~300 km).")

    static let spec = CommandSpec(
        name: "request",
        abstract: "Ask devaccessd for permissions for yourself; consent is asked at your terminal.",
        usage: "devaccess request PERMISSION... [--accuracy LEVEL] [--reason TEXT] [--once | --for DURATION | --always] "
            + "[--wait] [--json]",
        options: [reason, once, forDuration, always, wait, accuracy, CommonOptions.json, BrokerOptions.socket],
        discussion: """
        \(CommonOptions.permissionsHelp) Several are answered together.
        What is decided already is answered at once, without a prompt: a denial stays
        (an administrator can 'devaccess reset' it), and so does the policy (restricted).
        Otherwise the policy decides: allow (granted), ask (you choose at your terminal:
        once, for a time, always, or deny), auth_self (your password), auth_admin (the
        request waits for an administrator: 'devaccess pending', 'approve ID'; run the
        same request with --wait to wait for the answer). Prompts are read from your
        controlling terminal (/dev/tty), never from standard input. Ctrl-C, Ctrl-D or no
        answer within the broker's timeout record no decision.
        Without a scope option the policy's Keep= applies, else once: the grant lasts
        while the program that ran devaccess runs (devaccessd watches it and ends the
        grant when it exits). The policy's MaxDuration= shortens longer grants. Asking
        for a longer term than a standing grant's (--for 1h while --for 10m holds, or
        --always) is decided again, and the new grant replaces the old one. The new status is printed (stdout) with one
        line per permission saying what happened (stderr).
        Location is granted at a level (--accuracy, default exact): the prompt says it, the grant
        keeps it, and an approval grants the level asked. A finer level than a standing grant's
        is asked again; a coarser or equal one is answered by the grant. The policy's
        MaxAccuracy= answers a finer request at its cap (the message says so).
        Exit codes: the status of the first permission that is not authorized afterwards
        (0 all authorized, 2 limited, 3 denied, 4 notDetermined: dismissed, timed out or
        waiting for approval, 5 restricted, 6 unavailable); 77 when a prompt was needed but
        there is no terminal to ask on (as for 'run'); 1 on an error; 64 usage; 69 devaccessd
        unreachable.
        Interrupted (Ctrl-C), it ends by that signal after telling the broker.
        """)

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard !arguments.positionals.isEmpty else {
            throw UsageError(message: "missing PERMISSION (one or more of: "
                + Permission.all.map(\.rawValue).joined(separator: ", ") + ")", command: spec.name)
        }
        let permissions = try CommonOptions.permissions(arguments.positionals, command: spec.name)
        var accuracy: LocationAccuracy?
        if let text = arguments.value("accuracy") {
            guard permissions.contains(.location) else {
                throw UsageError(message: "'--accuracy' goes with location, which is not asked for", command: spec.name)
            }
            do {
                accuracy = try LocationAccuracy.parse(text)
            } catch {
                throw UsageError(message: "--accuracy: \(error.description)", command: spec.name)
            }
        }
        let scope = try requestedScope(arguments)
        let text = arguments.value("reason")
        if let text, text.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: spec.name)
        }
        let path = try BrokerOptions.socketPath(arguments, command: spec.name)
        let signals = SignalPipe.install()
        let order = AccessRequest(permissions: permissions, reason: text, scope: scope, wait: arguments.has("wait"),
                                  accuracy: accuracy)
        // The contract's request, with this command's side of the conversation: the terminal.
        let conversation = TerminalConversation(path: path, signals: signals, console: console)
        let broker: any DevAccessInterface = BrokerInterface(socketPath: path, timeout: .seconds(30))
        let decision: DecisionReply
        do {
            decision = try await broker.request(order, conversation: conversation)
        } catch {
            throw failure(error)
        }
        let code = try report(decision, json: arguments.has("json"), console: console,
                              style: try OutputStyle.resolve(arguments, command: spec.name))
        if let interrupted = conversation.interrupted { signals?.raiseAgain(interrupted) }
        // One code with `run` for "no terminal to ask on": nothing was decided, nothing granted.
        return conversation.prompts.noTerminal ? .noPermission : code
    }

    static func requestedScope(_ arguments: ParsedArguments) throws(UsageError) -> GrantTerm? {
        let given = ["once", "for", "always"].filter { arguments.has($0) || arguments.value($0) != nil }
        if given.count > 1 {
            throw UsageError(message: "'--\(given[0])' and '--\(given[1])' cannot be combined", command: spec.name)
        }
        if arguments.has("once") { return .once }
        if arguments.has("always") { return .always }
        guard let text = arguments.value("for") else { return nil }
        let seconds: Int64
        do {
            seconds = try DurationText.seconds(text)
        } catch {
            throw UsageError(message: "\(error.description) for '--for'", command: spec.name)
        }
        guard seconds <= GrantTerm.maxDurationSeconds else {
            throw UsageError(message: "'--for \(text)' is longer than 366 days; use --always", command: spec.name)
        }
        return .duration(seconds: seconds)
    }

    /// Prints what happened (stderr) and the statuses (stdout); returns the exit code.
    static func report(_ decision: DecisionReply, json: Bool, console: Console, style: OutputStyle) throws -> ExitCode {
        let time = HumanTime.now()
        for result in decision.results {
            console.error("devaccess: \(result.permission.rawValue): "
                + TerminalText.block(time.rewritingISOTimes(in: result.message)))
        }
        if json {
            console.out(StatusJSON.decision(decision))
        } else {
            let user = UserIdentity(uid: decision.uid, name: decision.user, primaryGID: 0, groups: [])
            console.out(StatusRendering(user: user, statuses: decision.permissions, gate: nil, time: HumanTime.now())
                .summary(), style: style)
        }
        if let first = decision.permissions.first(where: { $0.status != .authorized }) {
            return ExitCode(first.status)
        }
        return .success
    }

    /// Maps a failed conversation (`InterfaceError(conversation:)`) to the exit code and
    /// message scripts rely on.
    static func failure(_ error: InterfaceError) -> any Error {
        switch error {
        case .unreachable(let text):
            return CommandFailure(message: "\(text); \(DaemonStart.advice()); nothing was requested",
                                  code: .brokerUnreachable)
        case .brokerBusy(let text):
            return CommandFailure(message: text, code: .brokerUnreachable)
        case .refused(_, let reason):
            return CommandFailure(message: reason, code: .noPermission)
        case .badArgument(let text):
            return CommandFailure(message: text, code: .usage)
        case .notFound, .busy, .ledgerUnusable, .unavailable, .failed:
            return CommandFailure(message: error.description)
        }
    }
}

/// `devaccess request`'s side of the contract's request conversation: prompts shown at the
/// caller's terminal, a signal (Ctrl-C) ends the wait, at most 300 s unless an
/// administrator is waited for.
final class TerminalConversation: RequestConversation {
    let path: String
    let signals: SignalPipe?
    let console: Console
    var prompts: PromptSession
    /// A signal that ended a prompt: raised again once the broker's final answer is printed.
    var interrupted: Int32?

    init(path: String, signals: SignalPipe?, console: Console) {
        self.path = path
        self.signals = signals
        self.console = console
        prompts = PromptSession(signals: signals, console: console)
    }

    var watched: CInt? { signals?.readDescriptor }

    /// The broker answers within its prompt timeout; only an approval may take longer.
    func waitLimit(waitingForAdmin: Bool) -> Duration? { waitingForAdmin ? nil : .seconds(300) }

    /// devaccessd runs but did not answer: exit 69 with this sentence alone (`failure`).
    func limitPassed() -> InterfaceError {
        .brokerBusy("devaccessd at \(path) did not answer the request within 300 s")
    }

    func watchedIsReady(waitingForAdmin: Bool) {
        guard let signals, let number = signals.take() else { return }
        if waitingForAdmin {
            console.error("devaccess: stopped waiting; the request stays queued for an administrator")
        }
        signals.raiseAgain(number)
    }

    func prompt(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError) {
        if case .interrupted(let number) = try prompts.show(prompt, line: line) { interrupted = number }
    }

    func queued(_ queued: QueuedReply) {
        let list = queued.permissions.map(\.rawValue).joined(separator: ", ")
        console.error("devaccess: \(list): " + (queued.new ? "queued as request \(queued.pending)"
            : "already waiting as request \(queued.pending)") + " for an administrator ('devaccess approve "
            + "\(queued.pending)')" + (queued.waiting ? "; waiting for the answer (Ctrl-C stops waiting)" : ""))
    }
}

/// The prompts of one request (or run), shown on the controlling terminal and answered to the broker.
struct PromptSession {
    let signals: SignalPipe?
    let console: Console
    private var terminal: Terminal?
    /// A prompt came and there was no terminal to show it on.
    private(set) var noTerminal = false
    /// The prompt shown last: a password asked again shows only what changed below it.
    private var shown: PromptMessage?

    init(signals: SignalPipe?, console: Console) {
        self.signals = signals
        self.console = console
    }

    enum Outcome {
        case answered
        /// A signal ended the prompt; the broker was told. The caller dies of it once the
        /// broker's final answer is printed.
        case interrupted(Int32)
        /// The broker ended the prompt (its timeout); its answer is next on the socket.
        case ended
    }

    static let keys: [ConsentChoice: String] = [.allow(.once): "o", .allow(.duration): "f", .allow(.always): "a",
                                                .deny: "d"]

    mutating func show(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError) -> Outcome {
        if terminal == nil {
            switch Terminal.open() {
            case .success(let opened):
                terminal = opened
            case .failure(let error):
                noTerminal = true
                console.error("devaccess: cannot ask for consent: \(error); run the request from a terminal, or ask "
                    + "an administrator ('devaccess grant')")
                try line.answer(.cancel(.noTerminal))
                return .answered
            }
        }
        guard let terminal else { return .answered }
        terminal.write(TerminalText.block(PromptText.toShow(prompt, after: shown)) + "\n")
        shown = prompt
        switch prompt.kind {
        case .ask:
            for choice in prompt.choices {
                terminal.write("  [\(Self.keys[choice.choice] ?? "?")] \(TerminalText.block(choice.label))\n")
            }
            let keys = prompt.choices.compactMap { Self.keys[$0.choice] }.joined(separator: ", ")
            while true {
                terminal.write("Answer \(keys) within \(prompt.timeout) s (Ctrl-C or Ctrl-D: no decision): ")
                let input = read(terminal, line)
                guard case .line(let text) = input else { return try finish(input, terminal, line) }
                let word = text.trimmingWhitespace().lowercased()
                if let choice = prompt.choices.first(where: { Self.keys[$0.choice] == word || $0.choice.word == word }) {
                    try line.answer(.choice(choice.choice))
                    return .answered
                }
                terminal.write("Please answer with one of: \(keys).\n")
            }
        case .password:
            terminal.write("Password for \(TerminalText.block(prompt.user)) (within \(prompt.timeout) s; Enter alone: "
                + "no decision): ")
            terminal.disableEcho()
            let input = read(terminal, line)
            terminal.restoreEcho()
            terminal.write(PromptText.afterPassword(input))
            guard case .line(let password) = input else { return try finish(input, terminal, line) }
            // An empty line dismisses the prompt: it is no password to check (nor a wrong one).
            try line.answer(password.isEmpty ? .cancel(.dismissed) : .password(password))
            return .answered
        }
    }

    private func read(_ terminal: Terminal, _ line: any PromptLine) -> Terminal.Input {
        // A reply already buffered (the prompt timed out) makes the socket look idle.
        if line.hasBufferedReply { return .other }
        return terminal.readLine(signals: signals, other: line.pollDescriptor)
    }

    /// The prompt ended without an answer typed: tell the broker why (it records no decision).
    private func finish(_ input: Terminal.Input, _ terminal: Terminal,
                        _ line: any PromptLine) throws(InterfaceError) -> Outcome {
        terminal.write("\n")
        switch input {
        case .line:
            return .answered
        case .endOfInput:
            try line.answer(.cancel(.endOfInput))
            return .answered
        case .signal(let number):
            try line.answer(.cancel(.interrupted))
            return .interrupted(number)
        case .other:
            return .ended
        }
    }
}
