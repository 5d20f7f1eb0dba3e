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
                           environment: [String: String]? = nil) throws -> ProcessOutput {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
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

    /// Runs a shell command line, for setup steps (`useradd`, `mknod`, `setfacl`).
    @discardableResult
    public static func shell(_ command: String) throws -> ProcessOutput {
        try run("/bin/sh", ["-c", command])
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
