import Glibc
import DevAccessSystem
import Synchronization

/// The write end of the pipe the signal handler writes to; -1 before `SignalPipe.install`.
/// An atomic, because the handler may run on any thread at any moment.
private let signalPipeWriter = Atomic<Int32>(-1)

/// Turns SIGINT, SIGTERM, SIGHUP and SIGQUIT into bytes on a pipe, so the prompt loop sees
/// them in the same poll(2) as the terminal and the broker's socket, restores the
/// terminal, tells the broker, and only then dies of the signal (`raiseAgain`), as a
/// shell expects of an interrupted program.
final class SignalPipe: Sendable {
    static let signals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
    let readDescriptor: CInt

    private init(readDescriptor: CInt) {
        self.readDescriptor = readDescriptor
    }

    /// Installs the handlers; nil when no pipe can be made (the signals then keep their
    /// default action: the process dies and the broker records no decision).
    static func install(_ signals: [Int32] = SignalPipe.signals) -> SignalPipe? {
        var fds: [CInt] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        signalPipeWriter.store(fds[1], ordering: .sequentiallyConsistent)
        for number in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                var byte = UInt8(truncatingIfNeeded: number)
                let fd = signalPipeWriter.load(ordering: .relaxed)
                if fd >= 0 { _ = write(fd, &byte, 1) }
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = 0
            sigaction(number, &action, nil)
        }
        return SignalPipe(readDescriptor: fds[0])
    }

    /// The first signal received and not yet taken, if any.
    func take() -> Int32? {
        var byte: UInt8 = 0
        return read(readDescriptor, &byte, 1) == 1 ? Int32(byte) : nil
    }

    /// Dies of `number` with its default action (exit status 128 + number for the shell).
    func raiseAgain(_ number: Int32) -> Never {
        signal(number, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, number)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(number)
        _exit(128 + number)
    }
}

/// The user's controlling terminal (/dev/tty), where consent is asked: never standard
/// input, which may be a pipe or a file that nobody typed for this question.
final class Terminal {
    let descriptor: CInt
    /// /dev/tty, owned here: closed when the terminal goes.
    private let owner: FileDescriptor
    private var saved: termios?

    enum OpenError: Error, CustomStringConvertible {
        case none(String)
        var description: String {
            switch self {
            case .none(let why): return why
            }
        }
    }

    static func open() -> Result<Terminal, OpenError> {
        let fd = Glibc.open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            let failure = SystemCallError.current("open", path: "/dev/tty")
            let why = failure.errno == .noDevice ? "this process has no controlling terminal" : failure.description
            return .failure(.none(why))
        }
        return .success(Terminal(descriptor: fd))
    }

    private init(descriptor: CInt) {
        self.descriptor = descriptor
        owner = FileDescriptor(owning: descriptor)
    }

    deinit {
        // Before `owner` closes the descriptor.
        restoreEcho()
    }

    func write(_ text: String) {
        FileDescriptor.writeAll(descriptor, text)
    }

    /// Stops echoing typed characters (a password), keeping line editing and Ctrl-C.
    func disableEcho() {
        var current = termios()
        guard tcgetattr(descriptor, &current) == 0 else { return }
        if saved == nil { saved = current }
        current.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(descriptor, TCSAFLUSH, &current)
    }

    func restoreEcho() {
        guard var original = saved else { return }
        tcsetattr(descriptor, TCSAFLUSH, &original)
        saved = nil
    }

    enum Input {
        case line(String)
        /// Ctrl-D on an empty line, or the terminal went away.
        case endOfInput
        case signal(Int32)
        /// `other` became readable first (the broker answered: the prompt ended there).
        case other
    }

    /// Waits for one line typed on the terminal, a signal, or `other` (a socket) becoming
    /// readable, whichever comes first.
    func readLine(signals: SignalPipe?, other: CInt?) -> Input {
        var collected: [UInt8] = []
        while true {
            var interests = [Poll.Interest.readable(descriptor)]
            if let signals { interests.append(.readable(signals.readDescriptor)) }
            if let other { interests.append(.readable(other)) }
            guard let ready = try? Poll.wait(interests, until: nil) else { return .endOfInput }
            if signals != nil, ready[1] != 0, let number = signals?.take() { return .signal(number) }
            if other != nil, let last = ready.last, last != 0 { return .other }
            guard ready[0] != 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 1024)
            let read = valueOrErrno { buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) } }
            guard case .success(let count) = read else {
                if case .failure(.wouldBlock) = read { continue }
                return .endOfInput
            }
            if count == 0 {
                // Ctrl-D: with nothing typed, end of input; after some text, that text.
                return collected.isEmpty ? .endOfInput : .line(String(decoding: collected, as: UTF8.self))
            }
            collected += buffer[0..<count]
            if let newline = collected.firstIndex(of: 0x0a) {
                return .line(String(decoding: collected[..<newline], as: UTF8.self))
            }
        }
    }
}
