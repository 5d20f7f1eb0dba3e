import Foundation
import Testing
import DevAccessTestSupport

/// The built `devaccess` binary: output, errors and exit codes as a user sees them.
struct CommandLineTests {
    /// A loopback port with nothing listening, so location is unreachable at once.
    let closedGpsd = ["DEVACCESS_GPSD": "127.0.0.1:9"]

    @Test func helpGoesToStdoutAndExitsZero() throws {
        let result = try TestProcess.devaccess(["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("Usage: devaccess COMMAND"))
        for command in ["status", "check", "devices", "monitor"] {
            let help = try TestProcess.devaccess([command, "--help"])
            #expect(help.status == 0, "\(command) --help")
            #expect(help.stdout.contains("Usage: devaccess \(command)"), "\(command) --help")
        }
    }

    @Test func unknownCommandNamesTheWordAndExits64() throws {
        let result = try TestProcess.devaccess(["stauts"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("unknown command 'stauts' (did you mean 'status'?)"))
        #expect(result.stdout.isEmpty)
    }

    @Test func unknownPermissionListsTheValidOnes() throws {
        let result = try TestProcess.devaccess(["status", "camra"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("unknown permission 'camra' (did you mean 'camera'?); valid: camera, microphone, location"))
    }

    @Test func unknownFlagIsNamed() throws {
        let result = try TestProcess.devaccess(["devices", "--jsn"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("unknown option '--jsn' (did you mean '--json'?)"))
    }

    @Test func nonexistentUserAndBadUIDAreUsageErrors() throws {
        let missing = try TestProcess.devaccess(["status", "--user", "no-such-user-xyz"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("no user named 'no-such-user-xyz'"))
        let badUID = try TestProcess.devaccess(["status", "--user", "99999999999"])
        #expect(badUID.status == 64)
        #expect(badUID.stderr.contains("'99999999999' is not a user name or a uid"))
        let unknownUID = try TestProcess.devaccess(["check", "camera", "--user", "3999999"])
        #expect(unknownUID.status == 64)
        #expect(unknownUID.stderr.contains("no user with uid 3999999"))
    }

    @Test func checkNeedsExactlyOnePermission() throws {
        #expect(try TestProcess.devaccess(["check"]).status == 64)
        #expect(try TestProcess.devaccess(["check", "camera", "microphone"]).status == 64)
    }

    @Test func badGpsdSettingsAreUsageErrors() throws {
        #expect(try TestProcess.devaccess(["status", "--gpsd-timeout", "soon"]).status == 64)
        #expect(try TestProcess.devaccess(["status", "--gpsd", "host:notaport"]).status == 64)
    }

    @Test func statusJSONHasTheDocumentedShape() throws {
        let result = try TestProcess.devaccess(["status", "--json", "--user", "root"], environment: closedGpsd)
        #expect(result.status == 0, "\(result.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(document["user"] as? String == "root")
        #expect(document["uid"] as? Int == 0)
        let permissions = try #require(document["permissions"] as? [[String: Any]])
        #expect(permissions.map { $0["permission"] as? String } == ["camera", "microphone", "location"])
        let location = try #require(permissions.last)
        // Nothing listens on port 9: location must be unavailable, and say where it looked.
        #expect(location["status"] as? String == "unavailable")
        let reasons = try #require(location["reasons"] as? [[String: Any]])
        #expect(reasons.contains { ($0["message"] as? String ?? "").contains("127.0.0.1:9") })
        for permission in permissions {
            #expect(permission["devices"] is [Any])
            #expect(permission["drift"] is [Any])
        }
    }

    @Test func checkExitCodeFollowsTheStatus() throws {
        let json = try TestProcess.devaccess(["status", "location", "--json"], environment: closedGpsd)
        #expect(json.stdout.contains("\"status\": \"unavailable\""))
        let check = try TestProcess.devaccess(["check", "location"], environment: closedGpsd)
        #expect(check.status == 6)
        #expect(check.stdout.isEmpty && check.stderr.isEmpty)
    }

    @Test func devicesJSONListsEveryPermission() throws {
        let result = try TestProcess.devaccess(["devices", "--json"], environment: closedGpsd)
        #expect(result.status == 0)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let permissions = try #require(document["permissions"] as? [[String: Any]])
        #expect(permissions.count == 3)
    }
}
