import Foundation
import Glibc
import DevAccessTestSupport

/// The real `devaccess` binary against real nodes (mknod 1:3) and real users, with a
/// temporary ledger directory. Devices are declared through the DEBUG-only
/// `DEVACCESS_TEST_DEVICES` file, since udev does not know mknod'd nodes.
///
/// No devaccessd runs here: the commands that decide or record run in `--offline` mode
/// (root's repair mode: the engine in the command, under the engine lock), which `run`
/// adds to them. The socket points at an empty temporary path, so a daemon running on
/// the machine is never asked. Through the daemon they are tested in DevAccessBrokerTests.
final class AdminFixture: @unchecked Sendable {
    let nodes: TemporaryDirectory
    let state: TemporaryDirectory
    let alice: TestUser
    private var devices: [[String: Any]] = []

    init(_ tag: String) throws {
        nodes = try TemporaryDirectory()
        state = try TemporaryDirectory()
        alice = try TestUser("\(tag)")
    }

    var devicesFile: String { nodes.path + "/devices.json" }
    var ledgerPath: String { state.path + "/ledger.db" }

    var environment: [String: String] {
        ["DEVACCESS_TEST_DEVICES": devicesFile, "DEVACCESS_STATE_DIR": state.path, "DEVACCESS_GPSD": "127.0.0.1:9",
         "DEVACCESS_SOCKET": nodes.path + "/no-daemon.sock"]
    }

    /// A camera whose capture node is made now; returns the node's path.
    @discardableResult
    func camera(_ name: String, group: String = "root", mode: String = "0600") throws -> String {
        let path = try nodes.makeNullNode(name, group: group, mode: mode)
        try declare(name: name, path: path)
        return path
    }

    /// Declares a camera at `path` (which may be anything: the test decides what is planted there),
    /// expected to be device `major`:`minor`.
    func declare(name: String, path: String, permission: String = "camera", major: Int = 1, minor: Int = 3) throws {
        devices.append(["permission": permission, "id": "\(permission):test-\(name)", "name": "Test \(permission) \(name)",
                        "nodes": [["path": path, "major": major, "minor": minor]]])
        let data = try JSONSerialization.data(withJSONObject: ["devices": devices])
        try data.write(to: URL(fileURLWithPath: devicesFile))
    }

    /// The commands that go to devaccessd, or with `--offline` run the engine here.
    static let engineCommands: Set<String> = ["grant", "deny", "revoke", "reset", "list", "reconcile", "audit", "withdraw"]

    static func offline(_ arguments: [String]) -> [String] {
        guard let command = arguments.first, engineCommands.contains(command), !arguments.contains("--help"),
              !arguments.contains("--offline") else { return arguments }
        return arguments + ["--offline"]
    }

    func run(_ arguments: [String], extra: [String: String] = [:]) throws -> ProcessOutput {
        try TestProcess.devaccess(Self.offline(arguments), environment: environment.merging(extra) { _, new in new })
    }

    /// Runs the binary as `user` (not root), with that user's groups, exactly as given.
    func run(as user: TestUser, _ arguments: [String]) throws -> ProcessOutput {
        try TestProcess.run("/usr/bin/setpriv",
                            ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--",
                             TestProcess.devaccessBinary] + arguments, environment: environment)
    }

    func json(_ output: ProcessOutput) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any] else {
            throw SetupError("not a JSON object: \(output.stdout)")
        }
        return object
    }

    func sql(_ statement: String) throws -> ProcessOutput {
        try TestProcess.run("/usr/bin/sqlite3", [ledgerPath, statement])
    }

    func fileBytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    func getfacl(_ path: String) throws -> String {
        try TestProcess.run("/usr/bin/getfacl", ["-P", "-c", "-n", path]).stdout
    }
}
