import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import Foundation
import Glibc
import Testing
import DevAccessLaunch

/// A pipe whose ends the test owns (close-on-exec, as the broker keeps what it receives).
final class TestPipe {
    private(set) var readEnd: CInt
    private(set) var writeEnd: CInt

    init() throws {
        var ends: [CInt] = [-1, -1]
        guard pipe(&ends) == 0 else { throw SetupError("pipe: \(Errno.current)") }
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    func closeRead() {
        if readEnd >= 0 { close(readEnd) }
        readEnd = -1
    }

    func closeWrite() {
        if writeEnd >= 0 { close(writeEnd) }
        writeEnd = -1
    }

    func write(_ bytes: [UInt8]) throws {
        var rest = bytes[...]
        while !rest.isEmpty {
            let written = rest.withUnsafeBytes { Glibc.write(writeEnd, $0.baseAddress, $0.count) }
            guard written > 0 else { throw SetupError("write: \(Errno.current)") }
            rest = rest.dropFirst(written)
        }
    }

    /// Reads until EOF, or until `limit` bytes came; waits at most 20 s for each read.
    func read(upTo limit: Int = .max) throws -> [UInt8] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count < limit {
            var poller = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 20_000) == 1 else { throw SetupError("no data or EOF within 20 s") }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(readEnd, $0.baseAddress, min($0.count, limit - data.count)) }
            if count == 0 { break }
            guard count > 0 else {
                if errno == EINTR { continue }
                throw SetupError("read: \(Errno.current)")
            }
            data += buffer[..<count]
        }
        return data
    }

    deinit {
        closeRead()
        closeWrite()
    }
}

/// What a launched program left.
struct Finished {
    var status: ProcessExit
    var stdout: [UInt8]
    var stderr: [UInt8]
    var output: String { String(decoding: stdout, as: UTF8.self) }
    var errors: String { String(decoding: stderr, as: UTF8.self) }
}

/// The launched program with its three pipes; the test holds stdin's write end and both
/// read ends.
struct Running: ~Copyable {
    let process: LaunchedProcess
    let stdin: TestPipe
    let stdout: TestPipe
    let stderr: TestPipe

    /// Closes stdin, reads both outputs to EOF and reaps.
    func finish(input: [UInt8] = []) throws -> Finished {
        if !input.isEmpty { try stdin.write(input) }
        stdin.closeWrite()
        // Small outputs: each fits a pipe buffer, so reading one after the other cannot block.
        let out = try stdout.read()
        let err = try stderr.read()
        return Finished(status: try process.wait(), stdout: out, stderr: err)
    }
}

/// The identity and setup the tests launch with.
struct Launch {
    var user: TestUser
    var groups: [UInt32]
    var environment = ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    var workingDirectory = "/"
    var landlock: LandlockRuleset?

    func spec(_ executable: String, _ arguments: [String], stdin: CInt, stdout: CInt, stderr: CInt) -> LaunchSpec {
        LaunchSpec(executable: executable, arguments: arguments, environment: environment,
                   workingDirectory: workingDirectory, standardInput: stdin, standardOutput: stdout,
                   standardError: stderr, uid: user.uid, gid: user.gid, supplementaryGroups: groups,
                   landlock: landlock)
    }

    /// Starts the program with fresh pipes for 0, 1 and 2.
    func start(_ executable: String, _ arguments: [String]) throws -> Running {
        let input = try TestPipe(), output = try TestPipe(), errors = try TestPipe()
        let process = try ProgramLauncher.launch(spec(executable, arguments, stdin: input.readEnd,
                                                      stdout: output.writeEnd, stderr: errors.writeEnd))
        // The child has its copies; with ours closed, EOF comes when it exits.
        input.closeRead()
        output.closeWrite()
        errors.closeWrite()
        return Running(process: process, stdin: input, stdout: output, stderr: errors)
    }

    /// Runs the program to its end; `arguments` include argv[0].
    func run(_ executable: String, _ arguments: [String], input: [UInt8] = []) throws -> Finished {
        try start(executable, arguments).finish(input: input)
    }

    /// Runs a Python snippet (the system python: the PATH one is a pyenv shim).
    func python(_ code: String, _ arguments: [String] = []) throws -> Finished {
        try run("/usr/bin/python3", ["python3", "-c", code] + arguments)
    }
}

/// A run group id no other test and no daemon hands out at the same time (top of the range).
func testRunGroup() -> UInt32 {
    RunGroups.first + 0x00F0_0000 + UInt32.random(in: 0..<0x0010_0000)
}

/// A directory under /dev (devtmpfs, where real device nodes live), removed afterwards.
final class DeviceDirectory {
    let path: String

    init() throws {
        var template = Array("/dev/devaccess-test-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw SetupError("mkdtemp in /dev: \(Errno.current)") }
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        chmod(path, 0o755)
    }

    /// A /dev/null twin (1:3), 0600 root, with `group:<gid>:rw` in its ACL.
    func makeNode(_ name: String, aclGroup: UInt32) throws -> String {
        let node = "\(path)/\(name)"
        try TestProcess.setup("mknod", ["-m", "0600", node, "c", "1", "3"])
        try TestProcess.setup("setfacl", ["-m", "g:\(aclGroup):rw", node])
        return node
    }

    deinit { TestProcess.cleanup("rm", ["-rf", path]) }
}

/// The file descriptors open in process `pid`, by number.
func openDescriptors(of pid: Int32) throws -> [Int] {
    guard let directory = opendir("/proc/\(pid)/fd") else { throw SetupError("opendir /proc/\(pid)/fd: \(Errno.current)") }
    defer { closedir(directory) }
    var numbers: [Int] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if let number = Int(name) { numbers.append(number) }
    }
    return numbers.sorted()
}

/// A "Key:\tvalue" line of /proc/PID/status.
func statusField(_ name: String, of pid: Int32) throws -> String {
    let text = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
        return line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
    }
    throw SetupError("no \(name) in /proc/\(pid)/status")
}

