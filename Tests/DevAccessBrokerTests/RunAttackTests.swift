import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `devaccess run` as an unprivileged user attacks it: what devaccessd (root) does with the
/// program path before anything runs, and whether what runs is what was decided for.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes nodes, users and ACLs"))
struct RunAttackTests {
    /// The fields of /proc/PID/stat after the command (field 3 on): state, ppid, pgrp, session, tty_nr.
    static func statFields(_ pid: Int32) -> [String] {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return [] }
        return text[text.index(after: close)...].split(separator: " ").map(String.init)
    }

    /// Python: `run(socket, program, ...)` sends a `run` as devaccess would, without the
    /// CLI's own checks (an attacker's client), and returns the replies until the final one.
    static let rawClient = """
        import array, json, os, socket
        def run(path, program, arguments=None, permissions=("camera",), streams=(0, 1, 2), directory="/",
                environment=(), before_final=None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            message = {"version": 5, "id": 1, "type": "run", "program": program,
                       "arguments": arguments or [program], "environment": list(environment),
                       "directory": directory, "umask": 18, "permissions": list(permissions)}
            line = (json.dumps(message) + "\\n").encode()
            sock.sendmsg([line[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", streams))])
            sock.sendall(line[1:])
            replies, buffer = [], b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\\n" in buffer:
                    text, buffer = buffer.split(b"\\n", 1)
                    reply = json.loads(text)
                    replies.append(reply)
                    if reply["type"] == "run-started" and before_final:
                        before_final(reply)
                    if reply["type"] not in ("run-started", "prompt"):
                        sock.close()
                        return replies
            sock.close()
            return replies

        """

    // MARK: - The program path is opened by root

    /// devaccessd opened the named path as root, O_RDONLY without O_NOCTTY, before checking
    /// that it is a regular file. A pty the user made (and nobody has opened yet) named as
    /// the program became the controlling terminal of devaccessd's session when devaccessd
    /// leads one (as under systemd); the user then types ^Z or ^C on the master and devaccessd
    /// stops. Any device the user names gets opened by root too (a watchdog starts, a tape
    /// rewinds). Now the path is opened O_PATH: nothing is opened until it is known to be a
    /// regular file.
    @Test func namingAPtyAsTheProgramDoesNotGiveDevaccessdAControllingTerminal() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n", daemonLeadsSession: true)
        let user = try TestUser("runatty")
        let daemon = setup.daemon.pid
        #expect(Self.statFields(daemon)[3] == String(daemon), "devaccessd leads no session: \(Self.statFields(daemon))")
        let script = Self.rawClient + """
            import ctypes, os, subprocess, sys, time
            libc = ctypes.CDLL(None)
            libc.ptsname.restype = ctypes.c_char_p
            master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
            assert libc.grantpt(master) == 0 and libc.unlockpt(master) == 0
            slave = libc.ptsname(master).decode()
            # Not the CLI: it checks the path first (access X_OK); devaccessd must not rely on that.
            replies = run(sys.argv[2], slave)
            with open("/proc/%s/stat" % sys.argv[1]) as stat:
                tty = stat.read().rsplit(")", 1)[1].split()[4]
            print(tty, replies)
            # ^C on the terminal: SIGINT to its foreground process group.
            os.write(master, b"\\x03")
            time.sleep(1)
            """
        let attack = try user.python(script, [String(daemon), setup.daemon.socketPath])
        #expect(attack.stdout.hasPrefix("0 "), "devaccessd got the user's pty as its controlling terminal: \(attack.stdout)")
        #expect(setup.daemon.process.isRunning, "devaccessd stopped after ^C on the user's pty: \(attack.stdout)")
    }
}
