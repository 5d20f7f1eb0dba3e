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
        /// `level`: a coarser location accuracy the person typed (`once city CODE`).
        case chose(ConsentChoice, level: LocationAccuracy?)
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
    let node: ConsentChannel.Node
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

    /// Writes `text` and the choices (and, for location, the coarser `levels` one may add),
    /// then reads one answer within `timeout`.
    func ask(_ text: String, choices: [PromptChoice], levels: [LocationAccuracy] = [], timeout: Duration) async -> End {
        await DetachedThread.run(name: "devaccessd terminal prompt") {
            self.run(text, choices: choices, levels: levels, timeout: timeout)
        }
    }

    /// Terminals with a question open: one question per terminal at a time, so two
    /// requests never race for one answer.
    private static let busy = Mutex<Set<String>>([])

    private func run(_ text: String, choices: [PromptChoice], levels: [LocationAccuracy], timeout: Duration) -> End {
        guard Self.busy.withLock({ $0.insert(path).inserted }) else {
            return .failed("another devaccessd question is open on \(path)")
        }
        defer { _ = Self.busy.withLock { $0.remove(path) } }
        return ask(text, choices: choices, levels: levels, timeout: timeout)
    }

    private func ask(_ text: String, choices: [PromptChoice], levels: [LocationAccuracy], timeout: Duration) -> End {
        // O_NOCTTY: the broker must never get a controlling terminal; O_NOFOLLOW: the
        // path was checked, a symlink swapped in since is refused.
        let fd = open(path, O_RDWR | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return .failed("\(path): \(Errno.current)") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFCHR, info.st_uid == owner, isatty(fd) == 1,
              UInt64(info.st_dev) == node.device, UInt64(info.st_ino) == node.inode else {
            return .failed("\(path) is no longer the user's terminal")
        }
        // Pinned first, so the checks below are about the process that stays pinned.
        let lifetime = devaccess_pidfd_open(requester, 0)
        guard lifetime >= 0 else { return .failed("the requesting program (pid \(requester)) has ended") }
        defer { close(lifetime) }
        // The broker has no controlling terminal, so it cannot ask the terminal (tcgetpgrp);
        // the kernel tells through the requester's /proc/PID/stat instead.
        guard isForeground(terminal: UInt64(info.st_rdev)) else {
            return .failed("the requesting program (pid \(requester)) is not the foreground job of \(path), so an "
                + "answer typed there would be meant for something else")
        }
        // Keys typed before the question was shown are not an answer to it.
        tcflush(fd, TCIFLUSH)
        // The requester, as the foreground job, may have stopped the terminal's output
        // (Ctrl-S, tcflow) to hide this question behind one of its own: start it again. An
        // answer must carry the code shown here, which only the person reading the real
        // question knows (the user's programs cannot read what is written to a terminal).
        tcflow(fd, TCOON)
        let code = String(UInt32.random(in: 100...999))
        // The answer is a word that says what it does, not a number or a letter: a program
        // that redraws the screen could relabel "1)" but cannot change what "deny" means.
        let words = choices.map(\.choice.word)
        let width = words.map(\.count).max() ?? 0
        var prompt = "\r\n" + Self.terminalText(text) + "\r\n"
        for choice in choices {
            let word = choice.choice.word
            prompt += "  " + word + String(repeating: " ", count: width - word.count + 2)
                + Self.terminalText(choice.label) + "\r\n"
        }
        // A coarser location is one more word, between the choice and the code, so what
        // is granted is typed out in full (a redrawn screen cannot change what "city" means).
        if let coarser = levels.first {
            prompt += "  or allow a coarser location: add one of " + levels.map { "\($0) (\($0.approximately))" }
                .joined(separator: ", ") + ", e.g. \"once \(coarser) \(code)\"\r\n"
        }
        let seconds = Int(timeout.components.seconds)
        let ask = "devaccessd: type one word (" + words.joined(separator: ", ") + ") and the code \(code), e.g. \""
            + (words.last ?? "deny") + " \(code)\", within \(seconds) s (empty line or Ctrl-D: no decision): "
        guard write(fd, prompt + ask) else {
            return .failed("the question could not be shown on \(path) (its output is stopped or blocked)")
        }
        let deadline = ContinuousClock.now + timeout
        var line: [UInt8] = []
        var invalid = 0
        while true {
            if cancelled.load(ordering: .relaxed) {
                write(fd, "\r\ndevaccessd: the request was withdrawn; nothing was recorded\r\n")
                return .cancelled
            }
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                write(fd, "\r\ndevaccessd: no answer in time; nothing was recorded\r\n")
                return .timedOut
            }
            var descriptors = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: lifetime, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&descriptors, 2, CInt(min(200, max(1, left.components.seconds * 1000 + 1))))
            if ready < 0 && errno != EINTR { return .failed("poll \(path): \(Errno.current)") }
            guard ready > 0 else { continue }
            // Checked before reading, so no key is taken from whoever the terminal serves now.
            if descriptors[1].revents != 0 || !isForeground(terminal: UInt64(info.st_rdev)) {
                write(fd, "\r\ndevaccessd: the request was withdrawn; nothing was recorded\r\n")
                return .cancelled
            }
            let descriptor = descriptors[0]
            if descriptor.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 && descriptor.revents & Int16(POLLIN) == 0 {
                return .endOfInput
            }
            var buffer = [UInt8](repeating: 0, count: 256)
            let count = Glibc.read(fd, &buffer, buffer.count)
            if count < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                return .failed("read \(path): \(Errno.current)")
            }
            // Ctrl-D on an empty line (end of file in canonical mode).
            if count == 0 {
                write(fd, "\r\ndevaccessd: no answer; nothing was recorded\r\n")
                return .endOfInput
            }
            for byte in buffer.prefix(count) {
                guard byte == 0x0a || byte == 0x0d else {
                    if line.count < 64 { line.append(byte) }
                    continue
                }
                let typed = String(decoding: line, as: UTF8.self).trimmingWhitespace().lowercased()
                line.removeAll()
                if typed.isEmpty { return .dismissed }
                if let answer = Self.answer(typed, code: code, among: choices, levels: levels) {
                    let level = answer.level.map { " at \($0) accuracy (\($0.approximately))" } ?? ""
                    _ = write(fd, "devaccessd: \(Self.terminalText(answer.choice.label))\(level)\r\n")
                    return .chose(answer.choice.choice, level: answer.level)
                }
                invalid += 1
                guard invalid < 3 else {
                    _ = write(fd, "devaccessd: no valid answer; nothing was recorded\r\n")
                    return .dismissed
                }
                // What was typed is not repeated: it may have been meant for another program.
                _ = write(fd, "devaccessd: that is not an answer (a word and the code); " + ask)
            }
        }
    }

    /// Whether the requester runs with `terminal` as its controlling terminal and its
    /// process group is that terminal's foreground job.
    private func isForeground(terminal: UInt64) -> Bool {
        guard let state = ProcFile.stat(of: requester) else { return false }
        if let session, state.session != session { return false }
        return state.tty == terminal && state.group == state.foreground && state.group > 0
    }

    struct Answer: Sendable, Hashable {
        var choice: PromptChoice
        var level: LocationAccuracy?
    }

    /// "WORD CODE", or "WORD LEVEL CODE" allowing at one of the offered coarser `levels`:
    /// nil unless WORD is an offered choice's word, LEVEL an offered level (never with
    /// deny) and CODE the one shown.
    static func answer(_ typed: String, code: String, among choices: [PromptChoice],
                       levels: [LocationAccuracy] = []) -> Answer? {
        let words = typed.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard words.count == 2 || words.count == 3, words.last == code,
              let choice = choice(words[0], among: choices) else { return nil }
        guard words.count == 3 else { return Answer(choice: choice, level: nil) }
        guard choice.choice != .deny, let level = LocationAccuracy(rawValue: words[1]), levels.contains(level) else {
            return nil
        }
        return Answer(choice: choice, level: level)
    }

    /// An offered choice by its word ("once", "for", "always", "deny").
    static func choice(_ word: String, among choices: [PromptChoice]) -> PromptChoice? {
        choices.first { $0.choice.word == word }
    }

    /// Text from hardware names and requesters goes to a person's terminal: control
    /// characters are shown as \xNN, never sent (`TerminalText`); newlines become CR LF.
    static func terminalText(_ text: String) -> String {
        TerminalText.block(text).replacing("\n", with: "\r\n")
    }

    /// True when all of `text` reached the terminal within 2 s.
    @discardableResult
    private func write(_ fd: CInt, _ text: String) -> Bool {
        var bytes = Array(text.utf8)[...]
        let deadline = ContinuousClock.now + .seconds(2)
        while !bytes.isEmpty && ContinuousClock.now < deadline {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN {
                    var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&descriptor, 1, 100)
                    continue
                }
                return false
            }
            bytes = bytes.dropFirst(written)
        }
        return bytes.isEmpty
    }
}

extension TerminalPrompt {
    /// Text from the requester (its reason, its program's path) or from hardware, for one
    /// line of the question: newlines shown as \n, so it cannot add lines of its own, and
    /// long text cut, so it cannot push the real question off the screen.
    static func oneLine(_ text: String, limit: Int = 200) -> String {
        let flat = TerminalText.field(text)
        return flat.count > limit ? String(flat.prefix(limit)) + "..." : flat
    }
}
