import Foundation
import Glibc
import DevAccessTestSupport

/// The `devaccess-library-probe` program (Tests/UseCase/DevAccessLibraryProbe): one call of the
/// DevAccess library made by a real user, its answers as JSON lines.
enum LibraryProbe {
    static var binary: String { built("devaccess-library-probe") }

    /// A program of the package, from the build directory the tests run from.
    static func built(_ name: String) -> String {
        URL(fileURLWithPath: TestProcess.devaccessBinary).deletingLastPathComponent().appendingPathComponent(name).path
    }

    /// Runs the probe as `user` to completion; its last JSON line.
    static func run(_ user: TestUser, socket: String, _ arguments: [String]) throws -> [String: Any] {
        let result = try user.run(binary, arguments, environment: ["DEVACCESS_SOCKET": socket])
        guard let line = result.stdout.split(separator: "\n").last else {
            throw SetupError("the probe printed nothing (\(result.status)): \(result.stderr)")
        }
        return try json(String(line))
    }
}

/// The probe left running as a user (a waiting request, a stream of updates), its
/// output collected in a file; SIGKILLed when the test lets go of it.
final class RunningProbe {
    let process = Process()
    private let scratch: TemporaryDirectory
    private let outputPath: String

    /// `binary`: another program built with the package (an example); default the probe.
    init(_ user: TestUser, socket: String, _ arguments: [String], binary: String = LibraryProbe.binary,
         environment: [String: String] = [:]) throws {
        scratch = try TemporaryDirectory()
        outputPath = scratch.path + "/out"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--", binary] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["DEVACCESS_SOCKET": socket]) { $1 }
            .merging(environment) { $1 }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// What it printed so far.
    var text: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    /// Every JSON line printed so far.
    var lines: [[String: Any]] {
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? json(String($0)) }
    }

    /// Waits (up to `timeout`, a generous bound) until `count` lines were printed.
    func waitForLines(_ count: Int, timeout: Double = 10) throws -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let now = lines
            if now.count >= count { return now }
            usleep(5_000)
        }
        throw SetupError("the probe printed \(lines.count) of \(count) lines within \(timeout) s: \(lines)")
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }


    /// Waits for the exit (bounded); its status, nil when it did not exit in time.
    func waitForExit(timeout: Double = 10) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        return process.isRunning ? nil : process.terminationStatus
    }
}
