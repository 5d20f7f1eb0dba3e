import Foundation

/// Runs a program with its standard output on a real pseudo-terminal (openpty(3) in
/// python's pty module), as a person's terminal would be, and what it wrote there.
/// Standard input is the same terminal; standard error stays a pipe.
public enum PseudoTerminalRun {
    static let driver = #"""
    import os, pty, subprocess, sys, json
    master, slave = pty.openpty()
    env = json.loads(sys.argv[1])
    child = subprocess.Popen(sys.argv[2:], stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        data += chunk
    err = child.stderr.read()
    code = child.wait()
    sys.stdout.buffer.write(json.dumps({"status": code, "terminal": data.decode("utf-8", "replace"),
                                        "stderr": err.decode("utf-8", "replace")}).encode())
    """#

    /// `environment` is the whole environment of the program (PATH and TERM included).
    public static func run(_ executable: String, _ arguments: [String],
                           environment: [String: String]) throws -> ProcessOutput {
        let encoded = String(decoding: try JSONSerialization.data(withJSONObject: environment), as: UTF8.self)
        let result = try TestProcess.run("/usr/bin/python3", ["-c", driver, encoded, executable] + arguments)
        guard result.status == 0,
              let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
              let status = object["status"] as? Int, let terminal = object["terminal"] as? String else {
            throw SetupError("the pseudo-terminal driver failed: \(result.status) \(result.stderr)")
        }
        // The terminal's line discipline turns "\n" into "\r\n" on the way out (ONLCR).
        return ProcessOutput(status: Int32(status), stdout: terminal.replacingOccurrences(of: "\r\n", with: "\n"),
                             stderr: object["stderr"] as? String ?? "")
    }
}
