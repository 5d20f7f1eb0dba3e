import FoundationEssentials
import Glibc
import Synchronization
import CLinux
import CSystemd
import DevAccessCore
import DevAccessSystem
import DevAccessProtocol

/// A question the broker itself asks on the user's login terminal, and the line typed in
/// answer. It runs on a thread of its own for the few seconds a person takes (blocking
/// `poll` on one terminal), and can be cancelled when the requester leaves.
final class TerminalPrompt: Sendable {
    enum End: Sendable, Hashable {
        /// What the person typed: the choice, the permissions named, a coarser location level.
        case chose(ConsentAnswer)
        /// An empty line, or three answers that were not offered.
        case dismissed
        /// Ctrl-D (end of input), or the terminal hung up.
        case endOfInput
        case timedOut
        /// The requester went away (its connection closed): nothing more is asked.
        case cancelled
        /// The terminal could not be opened or used.
        case failed(String)
    }

    let path: String
    /// The node the question must go to (checked on the opened descriptor).
    let node: FileKey
    /// The login's session the requester must stay in, when known.
    let session: Int32?
    let owner: UInt32
    /// The requesting process: the terminal is read only while it lives and is the
    /// terminal's foreground job, so the broker never takes keys meant for the shell or
    /// another program (the requester ended, or was put in the background).
    let requester: Int32
    private let cancelled = Atomic<Bool>(false)

    init(terminal: ConsentChannel.Terminal, owner: UInt32, requester: Int32) {
        self.path = terminal.path
        self.node = terminal.node
        self.session = terminal.session
        self.owner = owner
        self.requester = requester
    }

    func cancel() { cancelled.store(true, ordering: .relaxed) }

    /// Writes `text` and the answers `question` takes, then reads one answer within `timeout`.
    func ask(_ text: String, question: ConsentAnswer.Question, timeout: Duration) async -> End {
        await DetachedThread.run(name: "devaccessd terminal prompt") {
            self.run(text, question: question, timeout: timeout)
        }
    }

    /// Terminals with a question open: one question per terminal at a time, so two
    /// requests never race for one answer.
    private static let busy = Mutex<Set<String>>([])

    private func run(_ text: String, question: ConsentAnswer.Question, timeout: Duration) -> End {
        guard Self.busy.withLock({ $0.insert(path).inserted }) else {
            return .failed("another devaccessd question is open on \(path)")
        }
        defer { _ = Self.busy.withLock { $0.remove(path) } }
        return ask(text, question: question, timeout: timeout)
    }

    private func ask(_ text: String, question: ConsentAnswer.Question, timeout: Duration) -> End {
        do throws(Refusal) {
            let terminal = try openTerminal()
            let lifetime = try pinRequester(on: terminal.device)
            let code = String(UInt32.random(in: 100...999))
            let (prompt, ask) = Self.question(text, question, code: code, seconds: Int(timeout.components.seconds))
            let asking = Asking(question: question, code: code, ask: ask)
            try show(prompt + ask, on: terminal.descriptor.rawValue, device: terminal.device)
            return readAnswer(asking, terminal: terminal.descriptor.rawValue, device: terminal.device,
                              lifetime: lifetime.rawValue, deadline: .now + timeout)
        } catch {
            return .failed(error.message)
        }
    }

    /// Why the question cannot be asked (`End.failed`).
    private struct Refusal: Error { let message: String }

    /// The terminal, opened for the question: its descriptor and its device number.
    private struct OpenTerminal: ~Copyable {
        let descriptor: FileDescriptor
        let device: UInt64
    }

    /// What one question takes: the answers offered, its code, and the line that asks.
    private struct Asking {
        let question: ConsentAnswer.Question
        let code: String
        let ask: String
    }

    /// The user's terminal, checked on the opened descriptor to be the node the question
    /// must go to, owned by the user.
    private func openTerminal() throws(Refusal) -> OpenTerminal {
        // O_NOCTTY: the broker must never get a controlling terminal; O_NOFOLLOW: the
        // path was checked, a symlink swapped in since is refused.
        let descriptor: FileDescriptor
        do {
            descriptor = try .open(path, O_RDWR | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        } catch {
            throw Refusal(message: "\(path): \(error.errno)")
        }
        guard let device = try? CharacterDevice.of(descriptor.rawValue), device.owner == owner,
              isatty(descriptor.rawValue) == 1, device.node == node else {
            throw Refusal(message: "\(path) is no longer the user's terminal")
        }
        return OpenTerminal(descriptor: descriptor, device: device.number)
    }

    /// A pidfd of the requester, which must be the foreground job of `device`. Pinned first,
    /// so the check is about the process that stays pinned.
    private func pinRequester(on device: UInt64) throws(Refusal) -> FileDescriptor {
        let fd = devaccess_pidfd_open(requester, 0)
        guard fd >= 0 else { throw Refusal(message: "the requesting program (pid \(requester)) has ended") }
        let lifetime = FileDescriptor(owning: fd)
        // The broker has no controlling terminal, so it cannot ask the terminal (tcgetpgrp);
        // the kernel tells through the requester's /proc/PID/stat instead.
        guard isForeground(terminal: device) else {
            throw Refusal(message: "the requesting program (pid \(requester)) is not the foreground job of \(path), "
                + "so an answer typed there would be meant for something else")
        }
        return lifetime
    }

    /// Shows the question on a terminal whose earlier input and output cannot change it.
    private func show(_ question: String, on fd: CInt, device: UInt64) throws(Refusal) {
        // Keys typed before the question was shown are not an answer to it.
        tcflush(fd, TCIFLUSH)
        // The requester, as the foreground job, may have stopped the terminal's output
        // (Ctrl-S, tcflow) to hide this question behind one of its own: start it again. An
        // answer must carry the code shown here, which only the person reading the real
        // question knows (the user's programs cannot read what is written to a terminal).
        tcflow(fd, TCOON)
        // Earlier output cannot hide or relabel the question: the rendering state is reset first.
        let reset = Self.renderingReset + (ConsentChannel.numbers(device).major == 4 ? "\u{1b}]R" : "")
        guard write(fd, reset + question) else {
            throw Refusal(message: "the question could not be shown on \(path) (its output is stopped or blocked)")
        }
    }

    /// Reads lines until one is an answer, the third is not, or the question ends.
    private func readAnswer(_ asking: Asking, terminal fd: CInt, device: UInt64, lifetime: CInt,
                            deadline: ContinuousClock.Instant) -> End {
        var line: [UInt8] = []
        var invalid = 0
        while true {
            let typed: [UInt8]
            switch nextInput(terminal: fd, device: device, lifetime: lifetime, deadline: deadline) {
            case .nothing: continue
            case .end(let end): return end
            case .typed(let bytes): typed = bytes
            }
            for byte in typed {
                guard byte == 0x0a || byte == 0x0d else {
                    if line.count < 256 { line.append(byte) }
                    continue
                }
                let entered = String(decoding: line, as: UTF8.self).trimmingWhitespace()
                line.removeAll()
                if let end = judge(entered, asking, terminal: fd) { return end }
                invalid += 1
                guard invalid < 3 else {
                    _ = write(fd, "devaccessd: no valid answer; nothing was recorded\r\n")
                    return .dismissed
                }
                // What was typed is not repeated: it may have been meant for another program.
                _ = write(fd, "devaccessd: that is not an answer (allow, what to allow, the term and the code, or "
                    + "deny and the code; nothing that was not asked); " + asking.ask)
            }
        }
    }

    /// What one wait on the terminal gave.
    private enum Input {
        case typed([UInt8])
        /// Nothing yet: wait again.
        case nothing
        case end(End)
    }

    /// Waits up to 200 ms (so a withdrawn request is seen soon) for keys typed on the
    /// terminal while the requester is still its foreground job.
    private func nextInput(terminal fd: CInt, device: UInt64, lifetime: CInt,
                           deadline: ContinuousClock.Instant) -> Input {
        if cancelled.load(ordering: .relaxed) {
            write(fd, "\r\ndevaccessd: the request was withdrawn; nothing was recorded\r\n")
            return .end(.cancelled)
        }
        let now = ContinuousClock.now
        guard now < deadline else {
            write(fd, "\r\ndevaccessd: no answer in time; nothing was recorded\r\n")
            return .end(.timedOut)
        }
        let ready: [Int16]
        do throws(SystemCallError) {
            guard let events = try Poll.wait([.readable(fd), .readable(lifetime)],
                                             until: min(deadline, now + .milliseconds(200))) else { return .nothing }
            ready = events
        } catch {
            return .end(.failed("poll \(path): \(error.errno)"))
        }
        // Checked before reading, so no key is taken from whoever the terminal serves now.
        if ready[1] != 0 || !isForeground(terminal: device) {
            write(fd, "\r\ndevaccessd: the request was withdrawn; nothing was recorded\r\n")
            return .end(.cancelled)
        }
        if ready[0] & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 && ready[0] & Int16(POLLIN) == 0 {
            return .end(.endOfInput)
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        switch valueOrErrno({ Glibc.read(fd, &buffer, buffer.count) }) {
        case .success(0):
            // Ctrl-D on an empty line (end of file in canonical mode).
            write(fd, "\r\ndevaccessd: no answer; nothing was recorded\r\n")
            return .end(.endOfInput)
        case .success(let count): return .typed(Array(buffer.prefix(count)))
        case .failure(let error) where error == .wouldBlock: return .nothing
        case .failure(let error): return .end(.failed("read \(path): \(error)"))
        }
    }

    /// The end a typed line makes: an empty line dismisses, an answer to the question is
    /// chosen (and confirmed on the terminal); nil for a line that is no answer.
    private func judge(_ typed: String, _ asking: Asking, terminal fd: CInt) -> End? {
        if typed.isEmpty { return .dismissed }
        guard let answer = ConsentAnswer.parse(typed, to: asking.question, code: asking.code) else { return nil }
        let level = answer.level.map { " at \($0) accuracy (\($0.approximately))" } ?? ""
        _ = write(fd, "devaccessd: \(Self.terminalText(answer.choice.label)): "
            + RequestText.list(answer.permissions) + "\(level)\r\n")
        return .chose(answer)
    }

    /// Whether the requester runs with `terminal` as its controlling terminal and its
    /// process group is that terminal's foreground job.
    private func isForeground(terminal: UInt64) -> Bool {
        guard let state = ProcFile.stat(of: requester) else { return false }
        if let session, state.session != session { return false }
        return state.tty == terminal && state.group == state.foreground && state.group > 0
    }

    /// Text from hardware names and requesters goes to a person's terminal: control
    /// characters are shown as \xNN, never sent (`TerminalText`); newlines become CR LF.
    static func terminalText(_ text: String) -> String {
        TerminalText.block(text).replacing("\n", with: "\r\n")
    }

    /// True when all of `text` reached the terminal within 2 s.
    @discardableResult
    private func write(_ fd: CInt, _ text: String) -> Bool {
        FileDescriptor.writeAll(fd, text, until: .now + .seconds(2))
    }
}

extension TerminalPrompt {
    /// Sent before the question: whatever the programs on the terminal set before cannot
    /// hide or relabel it. Ends a synchronized update (which would hold the question back
    /// until a redraw), leaves the alternate screen, clears the scrolling region and
    /// origin mode, resets SGR (conceal, colours), the colour palette and default colours
    /// (OSC 104/110/111), the character sets (G0 and G1 ASCII, shift in), insert mode,
    /// reverse screen, autowrap and cursor visibility. (A virtual console's palette is
    /// reset by ESC ] R, added there.)
    static let renderingReset = "\u{1b}[?2026l\u{1b}[?1049l\u{1b}[r\u{1b}[?6l\u{1b}[0m\u{1b}]104\u{7}\u{1b}]110\u{7}"
        + "\u{1b}]111\u{7}\u{1b}(B\u{1b})B\u{0f}\u{1b}[4l\u{1b}[?5l\u{1b}[?7h\u{1b}[?25h"

    /// The question's lines, each answer it takes written out in full, and the line that
    /// asks for one (repeated after a line that was no answer).
    static func question(_ text: String, _ question: ConsentAnswer.Question, code: String,
                         seconds: Int) -> (prompt: String, ask: String) {
        let answers = question.choices.map { question.answer($0, code: code) }
        let width = answers.map(\.count).max() ?? 0
        var prompt = "\r\n" + terminalText(text) + "\r\n"
        for (choice, answer) in zip(question.choices, answers) {
            prompt += "  " + answer + String(repeating: " ", count: width - answer.count + 2)
                + terminalText(choice.label) + "\r\n"
        }
        let allows = question.choices.filter { $0.choice != .deny }
        var some = question
        if question.permissions.count > 1, let first = question.permissions.first, let last = allows.last {
            some.permissions = [first]
            prompt += "  to allow only some, name only those, e.g. \"\(some.answer(last, code: code))\"\r\n"
        }
        // A coarser location is one more word after the term, so what is granted is typed
        // out in full (a redrawn screen cannot change what "city" means).
        if let coarser = question.levels.first, let first = allows.first {
            some.permissions = [.location]
            prompt += "  or allow a coarser location: add one of " + question.levels.map { "\($0) (\($0.approximately))" }
                .joined(separator: ", ") + " after the term, e.g. \"\(some.answer(first, code: code, level: coarser))\"\r\n"
        }
        let ask = "devaccessd: type a whole answer as shown, with the code \(code), within \(seconds) s (empty line or "
            + "Ctrl-D: no decision): "
        return (prompt, ask)
    }

    /// Text from the requester (its reason, its program's path) or from hardware, for one
    /// line of the question: newlines shown as \n, so it cannot add lines of its own, and
    /// long text cut, so it cannot push the real question off the screen.
    static func oneLine(_ text: String, limit: Int = 200) -> String {
        let flat = TerminalText.field(text)
        return flat.count > limit ? String(flat.prefix(limit)) + "..." : flat
    }
}
