import Foundation
import Glibc
import Testing
import DevAccessProtocol
import DevAccessTestSupport

/// scripts/install.sh into a staging tree, and `devaccess doctor` checking it against a
/// running broker and its ledger.
extension DaemonTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    static func install(into destination: String, buildDirectory: String? = nil) throws -> ProcessOutput {
        let build = buildDirectory ?? URL(fileURLWithPath: TestProcess.devaccessBinary).deletingLastPathComponent().path
        return try TestProcess.run("/bin/bash", [repository + "/scripts/install.sh"],
                                   environment: ["DESTDIR": destination, "BUILD_DIR": build, "PREFIX": "/usr/local"])
    }

    static func doctor(_ arguments: [String]) throws -> (status: Int32, checks: [String: (String, String)], raw: String) {
        let result = try TestProcess.devaccess(["doctor", "--json"] + arguments)
        let document = try json(result.stdout)
        var checks: [String: (String, String)] = [:]
        for check in document["checks"] as? [[String: Any]] ?? [] {
            checks[check["name"] as? String ?? "?"] = (check["status"] as? String ?? "?", check["message"] as? String ?? "")
        }
        return (result.status, checks, result.stdout)
    }

    @Test func installStagesEveryFileAndNeverActivatesIntoADestdir() throws {
        let stage = try TemporaryDirectory()
        let result = try Self.install(into: stage.path)
        #expect(result.status == 0, "\(result.stderr)")
        for file in ["/usr/local/bin/devaccess", "/usr/local/sbin/devaccessd",
                     "/usr/local/lib/systemd/system/devaccessd.service", "/usr/local/lib/sysusers.d/devaccess.conf",
                     "/usr/local/lib/tmpfiles.d/devaccess.conf", "/etc/udev/rules.d/70-devaccess.rules",
                     "/etc/devaccess/devaccess.conf", "/usr/local/share/man/man1/devaccess.1",
                     "/usr/local/share/man/man8/devaccessd.8",
                     "/usr/local/share/bash-completion/completions/devaccess",
                     "/usr/local/share/zsh/site-functions/_devaccess",
                     "/usr/local/share/fish/vendor_completions.d/devaccess.fish"] {
            #expect(FileManager.default.fileExists(atPath: stage.path + file), "\(file)")
        }
        #expect(FileManager.default.isExecutableFile(atPath: stage.path + "/usr/local/sbin/devaccessd"))
        // The opt-in deny-by-default rules are shipped, not activated.
        #expect(!FileManager.default.fileExists(atPath: stage.path + "/etc/udev/rules.d/72-devaccess-deny-by-default.rules"))
        #expect(FileManager.default.fileExists(
            atPath: stage.path + "/usr/local/share/devaccess/udev-rules/72-devaccess-deny-by-default.rules"))
        // One group, the one devaccessd reads (admins); a run gets a group id of its own, made per run.
        let sysusers = try String(contentsOfFile: stage.path + "/usr/local/lib/sysusers.d/devaccess.conf", encoding: .utf8)
        #expect(sysusers.split(separator: "\n").filter { $0.hasPrefix("g ") }.map { $0.split(separator: " ")[1] }
                    == ["devaccess-admin"], "\(sysusers)")
        let unit = try String(contentsOfFile: stage.path + "/usr/local/lib/systemd/system/devaccessd.service", encoding: .utf8)
        #expect(unit.contains("\nExecStart=/usr/local/sbin/devaccessd\n"), "ExecStart follows PREFIX")
        #expect(result.stdout.contains("nothing activated"))
        // A policy file the admin edited is kept; the shipped one goes beside it.
        let policy = stage.path + "/etc/devaccess/devaccess.conf"
        try Data("# edited\n".utf8).write(to: URL(fileURLWithPath: policy))
        #expect(try Self.install(into: stage.path).status == 0)
        #expect(try String(contentsOfFile: policy, encoding: .utf8) == "# edited\n")
        #expect(FileManager.default.fileExists(atPath: policy + ".new"))
    }

    /// uninstall.sh takes back what install.sh put into a staging tree: an edited policy
    /// and the ledger stay until --purge, after which nothing is left, not even a directory.
    @Test func uninstallLeavesOnlyWhatAnAdminMadeAndPurgeNothing() throws {
        let stage = try TemporaryDirectory()
        try #require(try Self.install(into: stage.path).status == 0)
        let policy = stage.path + "/etc/devaccess/devaccess.conf"
        try Data("# edited\n".utf8).write(to: URL(fileURLWithPath: policy))
        try FileManager.default.createDirectory(atPath: stage.path + "/var/lib/devaccess", withIntermediateDirectories: true)
        try Data("ledger".utf8).write(to: URL(fileURLWithPath: stage.path + "/var/lib/devaccess/ledger.db"))
        func left() throws -> [String] {
            try TestProcess.run("/usr/bin/find", [stage.path, "-mindepth", "1"]).stdout.split(separator: "\n")
                .map { String($0.dropFirst(stage.path.count)) }.sorted()
        }
        let uninstall = { (arguments: [String]) in
            try TestProcess.run("/bin/bash", [Self.repository + "/scripts/uninstall.sh"] + arguments,
                                environment: ["DESTDIR": stage.path, "PREFIX": "/usr/local"])
        }
        let kept = try uninstall([])
        #expect(kept.status == 0, "\(kept.stderr)")
        #expect(try left() == ["/etc", "/etc/devaccess", "/etc/devaccess/devaccess.conf", "/var", "/var/lib",
                               "/var/lib/devaccess", "/var/lib/devaccess/ledger.db"], "\(kept.stdout)")
        #expect(kept.stdout.contains("kept /etc/devaccess/devaccess.conf (edited") && kept.stdout.contains("kept /var/lib/devaccess"))
        let purged = try uninstall(["--purge"])
        #expect(purged.status == 0, "\(purged.stderr)")
        #expect(try left().isEmpty, "\(purged.stdout)")
    }

    @Test func installWithoutBinariesSaysWhatToDo() throws {
        let stage = try TemporaryDirectory()
        let empty = try TemporaryDirectory()
        let result = try Self.install(into: stage.path, buildDirectory: empty.path)
        #expect(result.status == 1)
        #expect(result.stderr.contains("build them first"))
    }

    @Test func doctorChecksAStagedInstallTheBrokerAndTheLedger() throws {
        let stage = try TemporaryDirectory()
        #expect(try Self.install(into: stage.path).status == 0)
        let daemon = try RunningDaemon()
        // Something in the ledger for the chain check: a refused request.
        let user = try TestUser("doc")
        #expect(try user.devaccess(["status", "--broker", "--socket", daemon.socketPath, "--user", "root"]).status == 77)

        let arguments = ["--root", stage.path, "--socket", daemon.socketPath, "--state-dir", daemon.stateDirectory]
        let healthy = try Self.doctor(arguments)
        for name in ["devaccessd", "unit", "sysusers", "tmpfiles", "udev-rules", "config", "man-pages", "state-dir",
                     "runtime-dir", "socket", "ledger"] {
            #expect(healthy.checks[name]?.0 == "ok", "\(name): \(healthy.checks[name] ?? ("missing", ""))")
        }
        #expect(healthy.checks["ledger"]?.1.contains("intact: 1 events") == true)
        #expect(healthy.checks["groups"] != nil)
        #expect(healthy.checks["groups"]?.1.contains("devaccess-admin") == true
                    && healthy.checks["groups"]?.1.contains("devaccess-camera") == false, "\(healthy.checks["groups"] ?? ("", ""))")
        // The consent channel follows the machine: TIOCSTI allowed means passwords instead.
        let tiocsti = (try? String(contentsOfFile: "/proc/sys/dev/tty/legacy_tiocsti", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let consent = healthy.checks["consent"]
        if tiocsti != "0" {
            #expect(consent?.0 == "warn" && consent?.1.contains("falls back to the user's password") == true,
                    "\(consent ?? ("missing", ""))")
        } else {
            #expect(consent != nil, "\(healthy.raw)")
        }
        let failures = healthy.checks.values.filter { $0.0 == "fail" }.count
        #expect(healthy.status == (failures == 0 ? 0 : 1), "\(healthy.raw)")

        // A policy that does not parse fails the config check.
        try Data("[camera]\nDefault=sometimes\n".utf8)
            .write(to: URL(fileURLWithPath: stage.path + "/etc/devaccess/devaccess.conf"))
        let badPolicy = try Self.doctor(arguments)
        #expect(badPolicy.checks["config"]?.0 == "fail")
        #expect(badPolicy.checks["config"]?.1.contains("devaccess.conf:2") == true, "\(badPolicy.checks["config"] ?? ("", ""))")
        #expect(badPolicy.status == 1)
        // $DEVACCESS_CONFIG_DIR, which devaccessd and `policy check` read, is what doctor checks too.
        let elsewhere = try TemporaryDirectory()
        try Data("[camera]\nDefault=allow\n".utf8).write(to: URL(fileURLWithPath: elsewhere.path + "/devaccess.conf"))
        let configured = try TestProcess.devaccess(["doctor", "--json"] + arguments,
                                                   environment: ["DEVACCESS_CONFIG_DIR": elsewhere.path])
        let configCheck = (try json(configured.stdout)["checks"] as? [[String: Any]] ?? [])
            .first { $0["name"] as? String == "config" }
        #expect(configCheck?["status"] as? String == "ok"
                    && (configCheck?["message"] as? String)?.contains(elsewhere.path + "/devaccess.conf") == true,
                "\(configCheck ?? [:])")

        // Broker stopped: the socket check fails and so does doctor.
        #expect(daemon.stop() == 0)
        let stopped = try Self.doctor(arguments)
        #expect(stopped.checks["socket"]?.0 == "fail")
        #expect(stopped.status == 1)

        // An edited audit event breaks the chain.
        let database = daemon.stateDirectory + "/ledger.db"
        let edit = try TestProcess.run("/usr/bin/sqlite3", [database, "UPDATE audit_events SET actor_name = 'someone' WHERE seq = 1"])
        #expect(edit.status == 0, "\(edit.stderr)")
        let tampered = try Self.doctor(arguments)
        #expect(tampered.checks["ledger"]?.0 == "fail")
        #expect(tampered.checks["ledger"]?.1.contains("broken") == true, "\(tampered.checks["ledger"] ?? ("", ""))")
    }

    @Test func doctorOnAnEmptyTreeFailsAndSaysWhatIsMissing() throws {
        let empty = try TemporaryDirectory()
        let result = try Self.doctor(["--root", empty.path, "--socket", empty.path + "/none.sock",
                                      "--state-dir", empty.path + "/state"])
        #expect(result.status == 1)
        #expect(result.checks["unit"]?.0 == "fail")
        #expect(result.checks["unit"]?.1.contains("run scripts/install.sh") == true)
        #expect(result.checks["config"]?.0 == "warn")
        #expect(result.checks["socket"]?.0 == "fail")
        #expect(result.checks["state-dir"]?.0 == "fail")
        let table = try TestProcess.devaccess(["doctor", "--root", empty.path, "--socket", empty.path + "/none.sock"])
        #expect(table.stdout.contains("fail  socket"))
    }

    @Test func statusThroughAnUnreachableBrokerExits69() throws {
        let empty = try TemporaryDirectory()
        let result = try TestProcess.devaccess(["status", "--broker", "--socket", empty.path + "/none.sock"])
        #expect(result.status == 69)
        #expect(result.stderr.contains("cannot reach devaccessd at \(empty.path)/none.sock"))
        #expect(result.stdout.isEmpty)
        let environment = try TestProcess.devaccess(["status", "--broker"],
                                                    environment: ["DEVACCESS_SOCKET": empty.path + "/other.sock"])
        #expect(environment.status == 69)
        #expect(environment.stderr.contains("other.sock"))
        #expect(try TestProcess.devaccess(["status", "--socket", "/x.sock"]).status == 64, "--socket needs --broker")
        #expect(try TestProcess.devaccess(["status", "--broker", "--gpsd", "127.0.0.1:1"]).status == 64)
    }
}
