import Foundation

/// What a finished child process left behind.
public struct ProcessOutput: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

public enum TestProcess {
    /// Runs a program to completion and captures its output. Test-only: it reads
    /// both pipes fully, so the child cannot block on a full pipe.
    public static func run(_ executable: String, _ arguments: [String],
                           environment: [String: String]? = nil, input: String? = nil) throws -> ProcessOutput {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let stdin = input.map { _ in Pipe() }
        process.standardInput = stdin ?? FileHandle.nullDevice
        try process.run()
        if let stdin, let input {
            stdin.fileHandleForWriting.write(Data(input.utf8))
            try stdin.fileHandleForWriting.close()
        }
        // Read stderr on another thread while stdout is read here.
        let errData = ErrBox()
        let reader = Thread { errData.data = err.fileHandleForReading.readDataToEndOfFile() }
        reader.start()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        while !errData.done { usleep(1000) }
        return ProcessOutput(status: process.terminationStatus,
                             stdout: String(decoding: outData, as: UTF8.self),
                             stderr: String(decoding: errData.data, as: UTF8.self))
    }

    /// Runs one setup step (`useradd`, `mknod`, `setfacl`, ...) with its arguments passed
    /// as they are, no shell between: a name or path cannot turn into syntax. A step that
    /// fails throws (with its stderr), so a test never goes on from a setup that did not happen.
    /// `input` goes to the step's stdin (`chpasswd`).
    @discardableResult
    public static func setup(_ program: String, _ arguments: [String], input: String? = nil) throws -> ProcessOutput {
        let result = try run(try executablePath(program), arguments, input: input)
        guard result.status == 0 else {
            throw SetupError("\(([program] + arguments).joined(separator: " ")) exited with \(result.status): "
                + result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return result
    }

    /// A clean-up step (`userdel`, `groupdel`, `rm`): best effort, its failure is not the
    /// test's (the thing may already be gone).
    public static func cleanup(_ program: String, _ arguments: [String]) {
        _ = try? run(try executablePath(program), arguments)
    }

    /// `program` as given when it is a path, else found in the administrator's PATH.
    static func executablePath(_ program: String) throws -> String {
        if program.contains("/") { return program }
        for directory in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
            let path = "\(directory)/\(program)"
            if access(path, X_OK) == 0 { return path }
        }
        throw SetupError("no program '\(program)' in /usr/sbin, /usr/bin, /sbin or /bin")
    }

    /// The freshly built `devaccess` next to the test binary (or $DEVACCESS_BIN).
    public static var devaccessBinary: String {
        if let path = ProcessInfo.processInfo.environment["DEVACCESS_BIN"] { return path }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        var directory = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // Inside an .xctest bundle directory, go up to the build products folder.
        while directory.path.contains(".xctest") { directory.deleteLastPathComponent() }
        return directory.appendingPathComponent("devaccess").path
    }

    public static func devaccess(_ arguments: [String], environment: [String: String]? = nil) throws -> ProcessOutput {
        try run(devaccessBinary, arguments, environment: environment)
    }
}

private final class ErrBox: @unchecked Sendable {
    private let lock = NSLock()
    private var _data = Data()
    private var _done = false
    var data: Data {
        get { lock.withLock { _data } }
        set { lock.withLock { _data = newValue; _done = true } }
    }
    var done: Bool { lock.withLock { _done } }
}
