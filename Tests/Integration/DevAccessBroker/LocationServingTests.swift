import Testing
import Foundation
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// Location served by the real devaccessd from a real gpsd (gpsfake cycling an NMEA log of
/// 48.1173 N, 11.516666667 E), to real users at their grants: `devaccess location` and the
/// gpsd-compatible endpoint with gpsd's own client, gpspipe.
@Suite(.serialized, .enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed (apt-get install gpsd gpsd-clients)"))
struct LocationServingTests {
    static let truth = (latitude: 48.1173, longitude: 11.516666667)
    static let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path

    /// Metres between two positions (haversine).
    static func metres(_ latitude: Double, _ longitude: Double) -> Double {
        let radians = Double.pi / 180
        let dLat = (latitude - truth.latitude) * radians, dLon = (longitude - truth.longitude) * radians
        let h = pow(sin(dLat / 2), 2) + cos(truth.latitude * radians) * cos(latitude * radians) * pow(sin(dLon / 2), 2)
        return 2 * 6_371_008.8 * asin(min(1, sqrt(h)))
    }

    final class Setup {
        let gpsd: GpsFakeProcess
        let daemon: RunningDaemon
        let endpointPort: UInt16
        var socket: [String] { ["--socket", daemon.socketPath] }

        init() throws {
            gpsd = try GpsFakeProcess(cycling: LocationServingTests.log)
            endpointPort = try freeLoopbackPort()
            daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(gpsd.port)", "--gpsd-timeout", "2000",
                                                   "--location-port", String(endpointPort)])
        }

        deinit { gpsd.stop() }

        func grant(_ user: TestUser, _ extra: [String]) throws {
            let result = try TestProcess.devaccess(["grant", "location", "--user", user.name] + extra + socket)
            guard result.status == 0 else { throw SetupError("grant location: \(result.stderr)") }
        }

        func ledger() throws -> Ledger {
            try Ledger(path: daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly, journal: .disabled)
        }

        /// `devaccess location --json` as `user`, waiting up to 10 s for gpsd's first fix.
        func location(_ user: TestUser, _ extra: [String] = []) throws -> (status: Int32, json: [String: Any], stderr: String) {
            let result = try user.devaccess(["location", "--json", "--wait", "10s"] + extra + socket)
            let document = result.status == 0 ? try json(result.stdout) : [:]
            return (result.status, document, result.stderr)
        }
    }

    @Test func eachUserIsServedAtTheirGrantAndNoFiner() throws {
        let setup = try Setup()
        let city = try TestUser("loccity")
        let exact = try TestUser("locexact")
        let none = try TestUser("locnone")
        try setup.grant(city, ["--accuracy", "city"])
        try setup.grant(exact, [])

        // gpsd's first fixes after it identified the receiver may be 2D, or 3D without an
        // altitude yet: wait for a complete one.
        var precise = try setup.location(exact)
        for _ in 0..<60 where precise.status == 0 && precise.json["altitude"] == nil {
            usleep(250_000)
            precise = try setup.location(exact)
        }
        #expect(precise.status == 0, "\(precise.stderr)")
        #expect(precise.json["latitude"] as? Double == Self.truth.latitude, "\(precise.json)")
        #expect(precise.json["longitude"] as? Double == Self.truth.longitude)
        #expect(precise.json["accuracy"] as? String == "exact" && precise.json["altitude"] as? Double == 545.4, "\(precise.json)")

        let coarse = try setup.location(city)
        #expect(coarse.status == 0, "\(coarse.stderr)")
        let latitude = try #require(coarse.json["latitude"] as? Double)
        let longitude = try #require(coarse.json["longitude"] as? Double)
        let distance = Self.metres(latitude, longitude)
        #expect(distance <= 10_000 && distance > 100, "served \(distance) m from the truth")
        #expect(coarse.json["accuracy"] as? String == "city" && coarse.json["granted"] as? String == "city")
        #expect(coarse.json["speed"] == nil && coarse.json["altitude"] == nil && coarse.json["track"] == nil)
        // The same cell every time.
        let again = try setup.location(city)
        #expect(again.json["latitude"] as? Double == latitude && again.json["longitude"] as? Double == longitude)
        // Coarser on request; finer refused (exit 77) and audited.
        let country = try setup.location(city, ["--accuracy", "country"])
        #expect(country.json["accuracy"] as? String == "country", "\(country.stderr)")
        let finer = try setup.location(city, ["--accuracy", "exact"])
        #expect(finer.status == 77 && finer.stderr.contains("city"), "\(finer.stderr)")
        // No grant: nothing (exit 77), audited as refused.
        let nothing = try setup.location(none)
        #expect(nothing.status == 77 && nothing.stderr.contains("no location grant"), "\(nothing.stderr)")
        let refusals = try setup.ledger().events().map(\.event).filter {
            $0.type == .refused && $0.details["operation"] == "location"
        }
        #expect(Set(refusals.compactMap(\.actor?.uid)) == [city.uid, none.uid], "\(refusals)")
        // A revoked grant serves nothing more.
        #expect(try TestProcess.devaccess(["revoke", "location", "--user", exact.name] + setup.socket).status == 0)
        #expect(try setup.location(exact).status == 77)
    }

    @Test func gpsdsOwnClientGetsTheGrantsLevelFromTheEndpoint() throws {
        let setup = try Setup()
        let city = try TestUser("gpcity")
        let none = try TestUser("gpnone")
        try setup.grant(city, ["--accuracy", "city"])
        // gpspipe -w: VERSION, DEVICES, WATCH, then reports; 8 lines are enough for a TPV with a position.
        let piped = try city.run("/usr/bin/timeout", ["20", "/usr/bin/gpspipe", "-w", "-n", "12",
                                                      "127.0.0.1:\(setup.endpointPort)"])
        let reports = piped.stdout.split(separator: "\n").compactMap { try? json(String($0)) }
        #expect(reports.first?["class"] as? String == "VERSION", "\(piped.stdout) \(piped.stderr)")
        let positions = reports.filter { $0["class"] as? String == "TPV" && $0["lat"] != nil }
        #expect(!positions.isEmpty, "\(piped.stdout)")
        for tpv in positions {
            let distance = Self.metres(tpv["lat"] as? Double ?? 0, tpv["lon"] as? Double ?? 0)
            #expect(distance <= 10_000 && distance > 100, "\(tpv)")
            #expect(tpv["speed"] == nil && tpv["altMSL"] == nil)
        }
        #expect(!reports.contains { $0["class"] as? String == "SKY" })
        // Without a grant: gpsd's ERROR report, then the connection ends.
        let refused = try none.run("/usr/bin/timeout", ["20", "/usr/bin/gpspipe", "-w", "-n", "12",
                                                        "127.0.0.1:\(setup.endpointPort)"])
        #expect(refused.stdout.contains("\"class\":\"ERROR\"") && refused.stdout.contains("no location grant"),
                "\(refused.stdout) \(refused.stderr)")
        #expect(!refused.stdout.contains("\"class\":\"TPV\""))
    }

    @Test func aRevokedGrantEndsAWatchingClient() throws {
        let setup = try Setup()
        let user = try TestUser("gprevoke")
        try setup.grant(user, ["--accuracy", "street"])
        // Where the client (as the user) says how its connection ended: /tmp, which it may write.
        let path = NSTemporaryDirectory() + "devaccess-ended-\(user.name).json"
        defer { unlink(path) }
        let client = try user.background("""
            import json, socket, sys, time
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            s.sendall(b'?WATCH={"enable":true,"json":true};\\n')
            buffer, positions = b"", 0
            s.settimeout(20)
            while positions < 2:
                buffer += s.recv(65536)
                while b"\\n" in buffer:
                    line, buffer = buffer.split(b"\\n", 1)
                    report = json.loads(line)
                    if report.get("class") == "TPV" and "lat" in report:
                        positions += 1
            print(json.dumps({"watching": True}), flush=True)
            ended, error = None, ""
            start = time.monotonic()
            while ended is None:
                chunk = s.recv(65536)
                if not chunk:
                    ended = time.monotonic() - start
                    break
                buffer += chunk
                while b"\\n" in buffer:
                    line, buffer = buffer.split(b"\\n", 1)
                    report = json.loads(line)
                    if report.get("class") == "ERROR":
                        error = report.get("message", "")
            with open(sys.argv[2], "w") as out:
                json.dump({"ended": ended, "error": error}, out)
            """, [String(setup.endpointPort), path], reportWithin: 30)
        defer { client.stop() }
        #expect(try TestProcess.devaccess(["revoke", "location", "--user", user.name] + setup.socket).status == 0)
        let deadline = Date().addingTimeInterval(15)
        while Date() < deadline, !FileManager.default.fileExists(atPath: path) { usleep(100_000) }
        let ended = try json(String(contentsOfFile: path, encoding: .utf8))
        // Looked up again every 2 s: a correctness bound, not a speed test.
        #expect((ended["ended"] as? Double ?? 99) < 10, "\(ended)")
        #expect((ended["error"] as? String)?.contains("no location grant") == true, "\(ended)")
    }

    @Test func noGpsdMeansUnavailableAndSaysWhy() throws {
        let port = try freeLoopbackPort()
        let daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(port)"])
        let user = try TestUser("locnogps")
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name, "--socket", daemon.socketPath])
                    .status == 0)
        let result = try user.devaccess(["location", "--wait", "1s", "--socket", daemon.socketPath])
        #expect(result.status == 6, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("127.0.0.1:\(port)"), "\(result.stderr)")
        #expect(daemon.process.isRunning)
    }
}

extension LocationServingTests {
    /// `devaccess monitor` follows location through devaccessd's endpoint, at the user's grant.
    @Test func monitorFollowsReceiversAndFixesAtTheGrant() throws {
        let setup = try Setup()
        let granted = try TestUser("monloc")
        let none = try TestUser("monnone")
        try setup.grant(granted, ["--accuracy", "city"])
        let endpoint = "127.0.0.1:\(setup.endpointPort)"
        // Runs until `timeout` ends it (exit 124): what it printed by then is the test.
        let watched = try granted.run("/usr/bin/timeout", ["8", TestProcess.devaccessBinary, "monitor", "--location",
                                                           endpoint] + setup.socket)
        #expect(watched.stdout.contains("add location receiver /dev/pts/"), "\(watched.stdout) \(watched.stderr)")
        #expect(watched.stdout.contains("fix location /dev/pts/") && watched.stdout.contains("none -> "),
                "\(watched.stdout)")
        let refused = try none.run("/usr/bin/timeout", ["4", TestProcess.devaccessBinary, "monitor", "--json",
                                                        "--location", endpoint] + setup.socket)
        let events = refused.stdout.split(separator: "\n").compactMap { try? json(String($0)) }
        #expect(events.contains { $0["event"] as? String == "location-unavailable"
                    && ($0["problem"] as? String)?.contains("no location grant") == true }, "\(refused.stdout)")
        #expect(!events.contains { $0["event"] as? String == "receiver-add" }, "\(refused.stdout)")
    }
}

extension LocationServingTests {
    /// `location --watch` prints a position once, not again while it stays in its cell.
    @Test func watchingPrintsAPositionOnceWhileItStaysInItsCell() throws {
        let setup = try Setup()
        let user = try TestUser("locwatch")
        try setup.grant(user, ["--accuracy", "city"])
        #expect(try setup.location(user).status == 0)  // gpsd has a fix now
        let watched = try user.run("/usr/bin/timeout", ["5", TestProcess.devaccessBinary, "location", "--watch", "--json"]
                                   + setup.socket)
        let lines = watched.stdout.split(separator: "\n").compactMap { try? json(String($0)) }
        #expect(lines.count == 1, "\(watched.stdout) \(watched.stderr)")
        #expect(lines.allSatisfy { $0["accuracy"] as? String == "city" })
        // Without a grant the watch ends at once: refused (77), not retried.
        let none = try TestUser("locwnone")
        let refused = try none.run("/usr/bin/timeout", ["5", TestProcess.devaccessBinary, "location", "--watch"]
                                   + setup.socket)
        #expect(refused.status == 77, "\(refused.status) \(refused.stderr)")
    }
}
