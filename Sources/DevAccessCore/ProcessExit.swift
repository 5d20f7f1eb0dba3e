/// How a child process ended, decoded from a `waitpid(2)` status.
public enum ProcessExit: Sendable, Hashable, CustomStringConvertible {
    /// `exit(code)`: 0-255.
    case exited(Int32)
    /// Killed by `signal`; `coreDumped` when the kernel wrote a core file.
    case signaled(Int32, coreDumped: Bool)

    /// nil for a stopped or continued child (reported only with `WUNTRACED`/`WCONTINUED`).
    public init?(waitStatus status: Int32) {
        // The layout glibc's W* macros read (bits/waitstatus.h), as Swift cannot import them.
        let low = status & 0x7f
        if low == 0 {
            self = .exited((status >> 8) & 0xff)
        } else if low != 0x7f && status != 0xffff {
            self = .signaled(low, coreDumped: status & 0x80 != 0)
        } else {
            return nil
        }
    }

    /// The status a shell gives for it (`$?`): the exit code, or 128 + the signal.
    public var shellStatus: Int32 {
        switch self {
        case .exited(let code): return code
        case .signaled(let signal, _): return 128 + signal
        }
    }

    /// "exited 0", "signal 15", "signal 11 (core dumped)": the ledger's words for a run's end.
    public var words: String {
        switch self {
        case .exited(let code): return "exited \(code)"
        case .signaled(let signal, let core): return "signal \(signal)" + (core ? " (core dumped)" : "")
        }
    }

    public var description: String {
        switch self {
        case .exited(let code): return "exited with status \(code)"
        case .signaled(let signal, let core):
            return "killed by signal \(signal)" + (core ? " (core dumped)" : "")
        }
    }
}
