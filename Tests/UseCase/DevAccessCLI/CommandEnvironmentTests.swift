import DevAccessArguments
import DevAccessCore
import DevAccessHardware
import DevAccessSystem
import Testing
@testable import DevAccessCLI

/// A command's defaults come from the environment `devaccess`'s main read, carried in its
/// `ParsedArguments`; an option given wins over the variable.
struct CommandEnvironmentTests {
    static let spec = CommandSpec(name: "status", abstract: "", usage: "",
                                  options: [CommonOptions.stateDir, BrokerOptions.socket, CommonOptions.gpsd],
                                  discussion: "")

    @Test func defaultsComeFromTheParsedEnvironment() throws {
        let environment: ProcessEnvironment = ["DEVACCESS_STATE_DIR": "/state", "DEVACCESS_SOCKET": "/run/x.sock",
                                               "DEVACCESS_GPSD": "[::1]:3000", "DEVACCESS_CONFIG_DIR": "/config",
                                               "PATH": "/nowhere"]
        let parsed = try ArgumentParser.parse([], for: Self.spec, environment: environment)
        #expect(parsed.environment == environment)
        #expect(try CommonOptions.stateDirectory(parsed, command: "status") == "/state")
        #expect(try BrokerOptions.socketPath(parsed, command: "status") == "/run/x.sock")
        #expect(try CommonOptions.reads(parsed, command: "status").probeOptions().gpsd == GpsdEndpoint(host: "::1", port: 3000))
        #expect(PolicyFiles.directory(parsed.environment) == "/config")
        #expect(throws: CommandFailure.self) { try RunCommand.resolve("sh", path: parsed.environment["PATH"]) }

        let given = try ArgumentParser.parse(["--state-dir", "/given", "--socket", "/run/given.sock", "--gpsd",
                                              "127.0.0.1:1"], for: Self.spec, environment: environment)
        #expect(try CommonOptions.stateDirectory(given, command: "status") == "/given")
        #expect(try BrokerOptions.socketPath(given, command: "status") == "/run/given.sock")
        #expect(try CommonOptions.reads(given, command: "status").probeOptions().gpsd == GpsdEndpoint(host: "127.0.0.1", port: 1))
    }

    @Test func nothingSetGivesTheBuiltInDefaultsWhateverThisProcessHas() throws {
        let parsed = try ArgumentParser.parse([], for: Self.spec)
        #expect(parsed.environment == ProcessEnvironment())
        #expect(try CommonOptions.stateDirectory(parsed, command: "status") == "/var/lib/devaccess")
        #expect(try BrokerOptions.socketPath(parsed, command: "status") == "/run/devaccess/broker.sock")
        #expect(try CommonOptions.reads(parsed, command: "status").probeOptions().gpsd == .default)
        #expect(PolicyFiles.directory(parsed.environment) == "/etc/devaccess")
        let shell = try RunCommand.resolve("sh", path: nil)  // /usr/local/bin:/usr/bin:/bin
        #expect(shell == "/usr/bin/sh" || shell == "/bin/sh")
    }
}
