import Foundation
import Glibc
import Synchronization

/// Machine settings for the duration of a test: /run/utmp present (so that `login` records
/// the session), `dev.tty.legacy_tiocsti` as given; both restored in `restore()` / deinit.
/// Machine-wide: use from `.serialized` suites, one at a time.
public final class TerminalSettings: Sendable {
    public static let utmpPath = "/run/utmp"
    public static let legacyTIOCSTIPath = "/proc/sys/dev/tty/legacy_tiocsti"

    private struct Saved {
        var createdUTMP: Bool
        var legacyTIOCSTI: String?
    }

    /// nil once restored.
    private let saved: Mutex<Saved?>

    /// `legacyTIOCSTI`: nil leaves the setting as it is.
    public init(legacyTIOCSTI: Int?) throws {
        var created = false
        let fd = open(Self.utmpPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o664)
        if fd >= 0 {
            created = true
            defer { close(fd) }
            // As Debian's systemd-update-utmp would leave it: login (root) writes, `who` reads.
            guard let group = getgrnam("utmp"), fchown(fd, 0, group.pointee.gr_gid) == 0, fchmod(fd, 0o664) == 0 else {
                unlink(Self.utmpPath)
                throw SetupError("cannot give \(Self.utmpPath) to root:utmp 0664")
            }
        } else if errno != EEXIST {
            throw SetupError("cannot create \(Self.utmpPath): \(String(cString: strerror(errno)))")
        }
        var old: String?
        if let legacyTIOCSTI {
            do {
                let current = try String(contentsOfFile: Self.legacyTIOCSTIPath, encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                try Self.writeSetting(String(legacyTIOCSTI))
                old = current
            } catch {
                if created { unlink(Self.utmpPath) }
                throw error
            }
        }
        saved = Mutex(Saved(createdUTMP: created, legacyTIOCSTI: old))
    }

    /// Puts back what `init` changed; later calls do nothing.
    public func restore() {
        guard let saved = saved.withLock({ value -> Saved? in
            defer { value = nil }
            return value
        }) else { return }
        if let old = saved.legacyTIOCSTI { try? Self.writeSetting(old) }
        if saved.createdUTMP { unlink(Self.utmpPath) }
    }

    deinit { restore() }

    private static func writeSetting(_ value: String) throws {
        let fd = open(legacyTIOCSTIPath, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SetupError("cannot open \(legacyTIOCSTIPath): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array((value + "\n").utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else {
            throw SetupError("cannot write \(value) to \(legacyTIOCSTIPath): \(String(cString: strerror(errno)))")
        }
    }
}

/// What one `LoginTerminal.run` saw.
public struct LoginRun: Sendable {
    /// Everything the terminal showed, `\r` removed: motd, prompts, echoed typing, output.
    public var output: String
    /// What the terminal showed from the line after the typed command line to the exit
    /// marker: the command's output, echoed answers, and whatever else wrote there meanwhile.
    public var commandOutput: String
    /// The command's exit status (128 + n after signal n), from the marker line; nil if the
    /// marker never came.
    public var exitStatus: Int32?
    /// How many scripted answers were typed.
    public var answered: Int
    /// The root `login` process: the utmp record's ut_pid, the parent of the user's shell.
    public var loginPID: Int32?
    /// The session's controlling terminal, "/dev/pts/N".
    public var tty: String?
}

/// Why a login session gave no result; `output` is what the terminal showed until then.
public struct LoginTerminalError: Error, CustomStringConvertible {
    public var reason: String
    public var output: String
    public var description: String { "\(reason); the terminal showed:\n\(output)" }
}

/// A person at a real login terminal: root runs `login -f USER` on a new pseudo-terminal,
/// so the user's shell has a PAM login session (audit sessionid, loginuid) and /dev/pts/N
/// as its controlling terminal, and types a command and answers into it.
public enum LoginTerminal {
    /// Types `command` (each word quoted) into the user's login shell once it prompts, then
    /// plays `answers` (each typed once its text appeared after the previous one; "{code}" in
    /// the keys becomes the last "the code N" shown since the command started; keys may
    /// be "\u{3}" for Ctrl-C or "\u{4}" for Ctrl-D; keys starting "{shell:COMMAND:shell}" have
    /// root run COMMAND, and wait for it, before the rest is typed), then types `exit`. `environment` goes
    /// through `env K=V`. Throws if login gives no prompt or `timeout` seconds pass (then the
    /// whole session is killed).
    public static func run(user: TestUser, command: [String], environment: [String: String] = [:],
                           answers: [(expect: String, type: String)] = [], timeout: Double = 60) throws -> LoginRun {
        guard getuid() == 0 else { throw SetupError("login -f needs root") }
        guard user.shell != "/usr/sbin/nologin" else {
            throw SetupError("\(user.name) has no login shell: make it with TestUser(_:shell: \"/bin/sh\")")
        }
        let line = try commandLine(command, environment: environment)
        let configuration: [String: Any] = [
            "user": user.name, "line": line, "answers": answers.map { [$0.expect, $0.type] }, "timeout": timeout,
        ]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: configuration), as: UTF8.self)
        let footprint = LoginFootprint(user: user)
        // The system python: the PATH one is a pyenv shim.
        let result = try TestProcess.run("/usr/bin/python3", ["-c", driver, json])
        let document = (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))) as? [String: Any]
        let tty = document?["tty"] as? String
        footprint.undo(tty: tty)
        guard result.status == 0, let document else {
            throw SetupError("login driver failed (\(result.status)): \(result.stderr)")
        }
        let output = document["out"] as? String ?? ""
        let phase = document["phase"] as? String ?? ""
        if document["timed_out"] as? Bool == true {
            throw LoginTerminalError(reason: "no end after \(timeout) s (waiting for: \(phase)); session killed",
                                     output: output)
        }
        guard phase == "command" || phase == "exit" else {
            throw LoginTerminalError(reason: "the session ended before the command ran (waiting for: \(phase))",
                                     output: output)
        }
        return LoginRun(output: output, commandOutput: document["command_output"] as? String ?? "",
                        exitStatus: (document["exit"] as? Int).map(Int32.init), answered: document["answered"] as? Int ?? 0,
                        loginPID: (document["login_pid"] as? Int).map(Int32.init), tty: tty)
    }

    /// The line typed at the prompt: a non-interactive sh that runs the command and prints
    /// the marker. Its `trap` makes it outlive a Ctrl-C (the interactive dash would drop the
    /// rest of the line); a caught signal is back to default in the command it execs.
    static func commandLine(_ command: [String], environment: [String: String]) throws -> String {
        guard !command.isEmpty else { throw SetupError("empty command") }
        let wrapper = #"trap : INT; "$@"; printf "\n__DA_%s__=%s\n" EXIT "$?""#
        var words = ["/bin/sh", "-c", wrapper, "sh"]
        if !environment.isEmpty {
            words.append("env")
            let nameCharacters = Set("_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
            for (key, value) in environment.sorted(by: { $0.key < $1.key }) {
                guard let first = key.first, !first.isNumber, key.allSatisfy(nameCharacters.contains) else {
                    throw SetupError("not an environment variable name: \(key)")
                }
                words.append("\(key)=\(value)")
            }
        }
        words += command
        // A control character would be taken by the line discipline (^C, ^U, ^D ...), not typed.
        if let bad = words.first(where: { $0.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7f } }) {
            throw SetupError("control character in \(bad.debugDescription): cannot be typed as part of a command")
        }
        let line = words.map(quote).joined(separator: " ")
        // The tty keeps 4095 bytes of a line in canonical mode and drops the rest.
        guard line.utf8.count < 4000 else { throw SetupError("command line too long to type (\(line.utf8.count) bytes)") }
        return line
    }

    /// A word as sh reads it back unchanged.
    static func quote(_ word: String) -> String {
        if !word.isEmpty && word.allSatisfy(plainCharacters.contains) { return word }
        return "'" + word.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }

    private static let plainCharacters = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:,+@%=-")

    /// argv[1]: {"user", "line", "answers": [[expect, type]], "timeout"}. Prints one JSON
    /// object: out, command_output, answered, exit, phase, timed_out, login_pid, tty.
    static let driver = #"""
        import os, pty, sys, time, select, json, signal, re, struct, fcntl, termios, subprocess
        cfg = json.loads(sys.argv[1])
        answers = [(e.encode(), t.encode()) for e, t in cfg["answers"]]
        deadline = time.time() + cfg["timeout"]
        caller = os.getppid()
        ttyr, ttyw = os.pipe()
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.close(ttyr)
                os.write(ttyw, os.ttyname(0).encode())
                os.close(ttyw)
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
                os.execve("/usr/bin/login", ["login", "-f", cfg["user"]], {"TERM": "dumb"})
            finally:
                os._exit(127)
        os.close(ttyw)
        tty = os.read(ttyr, 4096).decode()
        os.close(ttyr)

        raw = b""; phase = "prompt"; typed = 0; start = 0; mark = 0; step = 0
        exit_status = None; command_output = None; eof = False
        marker = re.compile(rb"\n__DA_EXIT__=(\d+)\n")

        def text():
            return raw.replace(b"\r", b"")

        def type_line(data):
            global typed
            typed = len(text())
            os.write(fd, data + b"\n")

        def prompted(now):
            return now.endswith(b"$ ") or now.endswith(b"# ")

        def session_pids():
            # login's descendants, and whatever shares its audit session (not the caller's).
            procs = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open("/proc/%s/stat" % entry) as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open("/proc/%s/sessionid" % entry) as f:
                        sid = f.read().strip()
                except (OSError, ValueError, IndexError):
                    continue
                procs[int(entry)] = (ppid, sid)
            with open("/proc/self/sessionid") as f:
                own = f.read().strip()
            audit = procs.get(pid, (0, own))[1]
            found = {pid}; grew = True
            while grew:
                grew = False
                for p, (ppid, sid) in procs.items():
                    if p not in found and (ppid in found or (sid == audit and audit not in (own, "4294967295"))):
                        found.add(p); grew = True
            return found

        while not eof:
            now = text()
            if phase == "prompt" and prompted(now):
                # "$ " may be motd text: a probe the shell answers proves it reads the terminal.
                type_line(b"printf '__DA_%s__\\n' READY")
                phase = "probe"
            elif phase == "probe" and now.find(b"\n__DA_READY__\n", typed) >= 0 and prompted(now):
                type_line(cfg["line"].encode())
                phase = "echo"
            elif phase == "echo":
                pos = now.find(b"\n", typed)
                if pos >= 0:
                    start = mark = pos + 1
                    phase = "command"
            if phase == "command":
                if step < len(answers):
                    pos = now.find(answers[step][0], mark)
                    if pos >= 0:
                        mark = pos + len(answers[step][0])
                        time.sleep(0.05)
                        keys = answers[step][1]
                        # "{shell:COMMAND:shell}" first: root runs COMMAND before the keys are
                        # typed (what changes while the person reads the question).
                        ran = re.match(rb"\{shell:(.*?):shell\}", keys, re.S)
                        if ran:
                            subprocess.run(["/bin/sh", "-ec", ran.group(1)], check=True)
                            keys = keys[ran.end():]
                        # "{code}": the one-time code the question just showed (devaccessd's
                        # terminal prompt), as the person reads it off the screen.
                        if b"{code}" in keys:
                            codes = re.findall(rb"the code (\d+)", now[start:mark])
                            keys = keys.replace(b"{code}", codes[-1] if codes else b"none")
                        os.write(fd, keys)
                        step += 1
                        continue
                found = marker.search(now, start)
                if found:
                    exit_status = int(found.group(1))
                    command_output = now[start:found.start()].decode("utf-8", "replace")
                    type_line(b"exit")
                    phase = "exit"
            # A test process that died leaves no session behind either.
            if time.time() > deadline or os.getppid() != caller:
                break
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    eof = True
                raw += data

        def kill_session():
            for p in session_pids():
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass

        if not eof:
            kill_session()
        os.close(fd)
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.time() > deadline + 5:
                kill_session()
            time.sleep(0.05)
        print(json.dumps({"out": text().decode("utf-8", "replace"), "command_output": command_output,
                          "answered": step, "exit": exit_status, "phase": phase, "timed_out": not eof,
                          "login_pid": pid, "tty": tty}))
        """#
}

/// What a login leaves behind: pam_motd's /run/motd.dynamic, a login and a logout record in
/// wtmp, the user's lastlog entry, and a utmp record that stays USER_PROCESS after logout
/// (login does not clear it; init would). Put back after each run so that tests leave the
/// machine as they found it.
struct LoginFootprint {
    static let motd = "/run/motd.dynamic"
    static let wtmp = "/var/log/wtmp"
    static let lastlog = "/var/log/lastlog"

    let motdExisted: Bool
    let wtmpSize: Int?
    let lastlogSize: Int?
    let lastlogOffset: Int
    /// The user's lastlog record before, if the file reached that far.
    let lastlogRecord: [UInt8]?
    let user: String

    init(user: TestUser) {
        self.user = user.name
        let uid = user.uid
        motdExisted = access(Self.motd, F_OK) == 0
        wtmpSize = Self.size(Self.wtmp)
        lastlogSize = Self.size(Self.lastlog)
        lastlogOffset = Int(uid) * MemoryLayout<lastlog>.size
        if let lastlogSize, lastlogOffset + MemoryLayout<lastlog>.size <= lastlogSize {
            lastlogRecord = Self.read(Self.lastlog, at: lastlogOffset, count: MemoryLayout<lastlog>.size)
        } else {
            lastlogRecord = nil
        }
    }

    /// `tty`: the session's terminal; wtmp is cut back only when every record added since
    /// is for that line (so another login's records are never lost).
    func undo(tty: String?) {
        if !motdExisted { unlink(Self.motd) }
        let line = tty.map { $0.hasPrefix("/dev/") ? String($0.dropFirst(5)) : $0 }
        if let line { Self.markDead(line: line, user: user) }
        if let old = wtmpSize, let line, Self.onlyRecords(of: line, inWTMPAfter: old) { truncate(Self.wtmp, off_t(old)) }
        guard let old = lastlogSize else {
            unlink(Self.lastlog)
            return
        }
        if let record = lastlogRecord {
            let fd = open(Self.lastlog, O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                _ = pwrite(fd, record, record.count, off_t(lastlogOffset))
                close(fd)
            }
        }
        if let now = Self.size(Self.lastlog), now > old { truncate(Self.lastlog, off_t(old)) }
    }

    private static func onlyRecords(of line: String, inWTMPAfter offset: Int) -> Bool {
        guard let now = size(wtmp), now > offset, let added = read(wtmp, at: offset, count: now - offset),
              let lineOffset = MemoryLayout<utmpx>.offset(of: \utmpx.ut_line) else { return false }
        let recordSize = MemoryLayout<utmpx>.size
        let lineSize = MemoryLayout.size(ofValue: utmpx().ut_line)
        guard added.count % recordSize == 0 else { return false }
        return stride(from: 0, to: added.count, by: recordSize).allSatisfy { base in
            let field = added[(base + lineOffset)..<(base + lineOffset + lineSize)]
            return String(decoding: field.prefix { $0 != 0 }, as: UTF8.self) == line
        }
    }

    /// As init marks a session's record once its process is gone.
    private static func markDead(line: String, user: String) {
        guard access(TerminalSettings.utmpPath, W_OK) == 0 else { return }
        _ = utmpname(TerminalSettings.utmpPath)  // utmpxname is GNU-only in the headers; the same file state
        setutxent()
        defer { endutxent() }
        while let entry = getutxent() {
            var record = entry.pointee
            guard record.ut_type == Int16(USER_PROCESS), text(record.ut_line) == line, text(record.ut_user) == user else {
                continue
            }
            let blank = utmpx()
            record.ut_type = Int16(DEAD_PROCESS)
            record.ut_user = blank.ut_user
            record.ut_host = blank.ut_host
            record.ut_tv.tv_sec = .init(truncatingIfNeeded: time(nil))
            record.ut_tv.tv_usec = 0
            _ = pututxline(&record)
        }
    }

    /// A fixed-size NUL-padded utmp field.
    private static func text<Field>(_ field: Field) -> String {
        withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    private static func size(_ path: String) -> Int? {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : nil
    }

    private static func read(_ path: String, at offset: Int, count: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: count)
        let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        return got == count ? bytes : nil
    }
}
