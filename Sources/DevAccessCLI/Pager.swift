import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import Glibc

/// Long text output (`list`, audit tables) through the user's pager, on a terminal only, as
/// git and systemctl do: `$DEVACCESS_PAGER`, else `$PAGER`, else `less -FRX` (which exits
/// at once when the text fits the screen). Either variable set but empty, `--no-pager`, or
/// standard output that is not a terminal (a pipe, a file): no pager.
final class Pager {
    static let option = OptionSpec(long: "no-pager", short: nil, value: nil,
                                   help: "Do not page the output on a terminal ($DEVACCESS_PAGER, $PAGER, less -FRX).")

    /// The shell command line to page with, nil for none. The first variable that is set
    /// decides, even when empty (that is how one says "no pager").
    static func command(environment: ProcessEnvironment) -> String? {
        for name in [ProcessEnvironment.Name.pager, "PAGER"] {
            if let value = environment[name] { return value.allSatisfy(\.isWhitespace) ? nil : value }
        }
        return "less -FRX"
    }

    /// Where the text goes now: the pager's pipe (open until `finish`).
    let descriptor: CInt
    /// The pipe's writing end, owned here: `finish` closes it so the pager sees the end.
    private var pipe: FileDescriptor?
    private let pid: pid_t

    private init(pipe: consuming FileDescriptor, pid: pid_t) {
        descriptor = pipe.rawValue
        self.pipe = consume pipe
        self.pid = pid
    }

    /// A started pager, or nil when there is to be none (or it cannot be started: then the
    /// text goes to standard output as it would without one).
    static func start(_ arguments: ParsedArguments) -> Pager? {
        guard !arguments.has("no-pager"), isatty(STDOUT_FILENO) == 1,
              let command = command(environment: arguments.environment) else { return nil }
        var fds: [CInt] = [-1, -1]
        guard Glibc.pipe(&fds) == 0 else { return nil }
        let reader = FileDescriptor(owning: fds[0]), writer = FileDescriptor(owning: fds[1])
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // less without options of its own: exit when the text fits, keep colours, no screen clearing.
        setenv("LESS", "FRX", 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, reader.rawValue, STDIN_FILENO)
        let words = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid = pid_t()
        guard posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ) == 0 else { return nil }
        reader.close()
        // Quitting the pager early closes the pipe: writes then fail (EPIPE) instead of killing us.
        signal(SIGPIPE, SIG_IGN)
        return Pager(pipe: writer, pid: pid)
    }

    /// `text` (made safe for a terminal) through a pager when there is to be one, else to stdout.
    static func show(_ text: String, _ arguments: ParsedArguments, console: Console) {
        guard let pager = start(arguments) else {
            console.out(text)
            return
        }
        FileDescriptor.writeAll(pager.descriptor, TerminalText.block(text.hasSuffix("\n") ? text : text + "\n"))
        pager.finish()
    }

    private var finished = false

    /// Closes the pipe and waits for the person to quit the pager.
    func finish() {
        guard !finished else { return }
        finished = true
        pipe = nil
        var status: Int32 = 0
        _ = valueOrErrno { waitpid(pid, &status, 0) }
    }

    deinit { finish() }
}
