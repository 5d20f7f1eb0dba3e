import Testing
import Foundation
import Glibc
import Synchronization
@testable import DevAccessCore
@testable import DevAccessBroker
import DevAccessLedger
import DevAccessTestSupport

/// An unprivileged local user against the location gate, for real: devaccessd as root,
/// gpsd fed by gpsfake from NMEA logs written here, clients as real test users.
///
/// Each test asserts the SAFE behaviour. Those that show a weakness of today's code are in
/// `LocationAttackFindings` below, off unless DEVACCESS_SHOW_FINDINGS is set, so CI stays
/// green; set it to see them fail.
enum LocationAttack {
    /// An NMEA log of 3D fixes (GGA+GSA+RMC per epoch, as make-nmea.py writes them) at the
    /// given positions and altitudes, one epoch each, in a temporary file.
    static func log(_ epochs: [(latitude: Double, longitude: Double, altitude: Double)]) throws -> String {
        var text = "# written by LocationAttackTests\n"
        for (second, epoch) in epochs.enumerated() {
            let time = String(format: "12%02d%02d.00", (second / 60) % 60, second % 60)
            let (lat, ns) = coordinate(epoch.latitude, degreeDigits: 2, positive: "N", negative: "S")
            let (lon, ew) = coordinate(epoch.longitude, degreeDigits: 3, positive: "E", negative: "W")
            let altitude = String(format: "%.1f", epoch.altitude)
            text += sentence("GPGGA,\(time),\(lat),\(ns),\(lon),\(ew),1,08,0.9,\(altitude),M,46.9,M,,")
            text += sentence("GPGSA,A,3,04,05,09,12,17,24,25,29,,,,,2.5,1.3,2.1")
            text += sentence("GPRMC,\(time),A,\(lat),\(ns),\(lon),\(ew),000.0,084.4,150624,003.1,W")
        }
        let path = NSTemporaryDirectory() + "devaccess-attack-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).nmea"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// ddmm.mmmm / dddmm.mmmm and the hemisphere letter.
    static func coordinate(_ value: Double, degreeDigits: Int, positive: String, negative: String) -> (String, String) {
        let magnitude = abs(value)
        let degrees = Int(magnitude)
        let minutes = (magnitude - Double(degrees)) * 60
        let text = String(format: "%0\(degreeDigits)d%07.4f", degrees, minutes)
        return (text, value < 0 ? negative : positive)
    }

    static func sentence(_ body: String) -> String {
        let checksum = body.utf8.reduce(UInt8(0)) { $0 ^ $1 }
        return "$\(body)*" + String(format: "%02X", checksum) + "\r\n"
    }

    /// A WATCH client (python, as the user) that collects `count` TPV reports with a
    /// position, or what it has after `seconds`; prints {"tpv": [...], "lines": [...first lines]}.
    static let watcher = """
        import json, socket, sys, time
        family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect((sys.argv[1], int(sys.argv[2])))
        s.sendall(b'?WATCH={"enable":true,"json":true};\\n')
        want, deadline = int(sys.argv[3]), time.monotonic() + float(sys.argv[4])
        buffer, tpv, lines = b"", [], []
        while len(tpv) < want and time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                lines.append({"class": "RESET"})
                break
            if not chunk:
                break
            buffer += chunk
            while b"\\n" in buffer:
                line, buffer = buffer.split(b"\\n", 1)
                report = json.loads(line)
                if len(lines) < 6:
                    lines.append(report)
                if report.get("class") == "TPV" and "lat" in report:
                    tpv.append(report)
        print(json.dumps({"tpv": tpv, "lines": lines}), flush=True)
        """

    static func watch(_ user: TestUser, host: String = "127.0.0.1", port: UInt16, reports: Int,
                      seconds: Int) throws -> (tpv: [[String: Any]], lines: [[String: Any]], stderr: String) {
        let result = try user.python(watcher, [host, String(port), String(reports), String(seconds)])
        guard result.status == 0, let document = try? json(result.stdout) else {
            return ([], [], result.stdout + result.stderr)
        }
        return (document["tpv"] as? [[String: Any]] ?? [], document["lines"] as? [[String: Any]] ?? [], result.stderr)
    }

    /// devaccessd on a gpsd fed from `log` (cycling), with the endpoint on a port of its own.
    final class Setup {
        let gpsd: GpsFakeProcess
        let daemon: RunningDaemon
        let endpointPort: UInt16
        var socket: [String] { ["--socket", daemon.socketPath] }

        init(log: String, daemonArguments: [String] = []) throws {
            gpsd = try GpsFakeProcess(cycling: log)
            endpointPort = try freeLoopbackPort()
            daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(gpsd.port)", "--gpsd-timeout", "2000",
                                                   "--location-port", String(endpointPort)] + daemonArguments)
        }

        deinit { gpsd.stop() }

        func grant(_ user: TestUser, _ accuracy: LocationAccuracy) throws {
            let result = try TestProcess.devaccess(["grant", "location", "--user", user.name,
                                                    "--accuracy", accuracy.rawValue] + socket)
            guard result.status == 0 else { throw SetupError("grant location: \(result.stderr)") }
        }

        func location(_ user: TestUser, _ extra: [String] = []) throws -> (status: Int32, json: [String: Any], stderr: String) {
            let result = try user.devaccess(["location", "--json", "--wait", "10s"] + extra + socket)
            return (result.status, result.status == 0 ? try json(result.stdout) : [:], result.stderr)
        }
    }
}

/// Attacks the gate withstands today (kept as regression tests).
@Suite(.serialized, .enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed (apt-get install gpsd gpsd-clients)"))
struct LocationAttackTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path

    /// IPv4-mapped IPv6 (an AF_INET6 socket to ::ffff:127.0.0.1) reaches the IPv4 listener:
    /// the peer is still found by sock_diag and served at its own grant, and a user without
    /// a grant is still refused. Also over ::1.
    @Test func mappedAndIPv6PeersAreStillIdentified() throws {
        let setup = try LocationAttack.Setup(log: Self.fixture)
        let city = try TestUser("lamapcity")
        let none = try TestUser("lamapnone")
        try setup.grant(city, .city)
        for host in ["::ffff:127.0.0.1", "::1"] {
            let served = try LocationAttack.watch(city, host: host, port: setup.endpointPort, reports: 2, seconds: 20)
            #expect(served.tpv.count == 2, "\(host): \(served)")
            for tpv in served.tpv {
                #expect(tpv["eph"] as? Double == 10_000 && tpv["altMSL"] == nil && tpv["speed"] == nil, "\(host): \(tpv)")
            }
            let refused = try LocationAttack.watch(none, host: host, port: setup.endpointPort, reports: 1, seconds: 8)
            #expect(refused.tpv.isEmpty, "\(host): \(refused)")
            // The reason, or a reset: the endpoint closes with the client's WATCH unread, and
            // the kernel then sends RST, which can overtake the ERROR line (finding 11).
            #expect(refused.lines.contains { ($0["message"] as? String)?.contains("no location grant") == true
                        || $0["class"] as? String == "RESET" },
                    "\(host): \(refused)")
        }
    }

    /// A refused client should always read why. The endpoint writes gpsd's ERROR report and
    /// closes at once; were the client's commands still unread, the kernel would send RST
    /// and could throw the ERROR away. Here an ungranted client keeps writing ?VERSION
    /// while it reads, five times: every attempt reads the ERROR report. (Once, under the
    /// full suite's load, a refused client of mappedAndIPv6PeersAreStillIdentified got a
    /// bare reset: finding 11, cause not pinned down.)
    @Test func aRefusedClientAlwaysReadsWhy() throws {
        let port = try freeLoopbackPort()
        let daemon = try RunningDaemon(arguments: ["--location-port", String(port)])
        let user = try TestUser("larst")
        let result = try user.python("""
            import json, socket, sys, threading, time
            outcomes = []
            for attempt in range(5):
                s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
                def talk():
                    try:
                        for _ in range(200):
                            s.send(b"?VERSION;")
                            time.sleep(0.002)
                    except OSError:
                        pass
                writer = threading.Thread(target=talk, daemon=True)
                writer.start()
                data = b""
                try:
                    s.settimeout(5)
                    while True:
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    outcomes.append("error" if b"no location grant" in data else "closed")
                except ConnectionResetError:
                    outcomes.append("error" if b"no location grant" in data else "reset")
                except socket.timeout:
                    outcomes.append("timeout")
                writer.join()
                s.close()
                time.sleep(2.1)
            print(json.dumps({"outcomes": outcomes}))
            """, [String(port)])
        let outcomes = (try? json(result.stdout))?["outcomes"] as? [String] ?? []
        #expect(outcomes.count == 5 && outcomes.allSatisfy { $0 == "error" }, "\(outcomes) \(result.stderr)")
        #expect(daemon.process.isRunning)
    }

    /// `devaccess location --wait` decided the level once, then waited up to 30 s for a fix
    /// and served it at that level: a grant revoked during the wait did not stop it
    /// (finding 7 of the hostile-loc report; fixed: the level is looked up again after a
    /// wait). Here gpsd comes up only after the revoke: nothing is served.
    @Test func aRequestWaitingForAFixIsNotServedAfterTheGrantIsRevoked() throws {
        let port = try freeLoopbackPort()
        let daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(port)", "--gpsd-timeout", "2000"])
        let user = try TestUser("lawaitrev")
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name, "--socket", daemon.socketPath])
                    .status == 0)
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<ProcessOutput?>(nil)
        DispatchQueue.global().async {
            let result = try? user.devaccess(["location", "--json", "--wait", "30s", "--socket", daemon.socketPath])
            outcome.withLock { $0 = result }
            done.signal()
        }
        // The request is in (it decided the level), waiting for gpsd; then the revoke.
        usleep(1_500_000)
        #expect(try TestProcess.devaccess(["revoke", "location", "--user", user.name, "--socket", daemon.socketPath])
                    .status == 0)
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let gpsd = try GpsFakeProcess(log: log, port: port)
        defer { gpsd.stop() }
        #expect(done.wait(timeout: .now() + 40) == .success)
        let result = try #require(outcome.withLock { $0 })
        #expect(result.status != 0, "served after the revoke: \(result.stdout)")
    }

    /// A connection its client has already closed is found by sock_diag as a TIME_WAIT
    /// socket, which the kernel reports as uid 0: taken for root, any user connecting and
    /// closing in a loop wrote "root was refused location" into the audit (finding 8 of
    /// the hostile-loc report; fixed in the shim: a socket no process holds names nobody).
    @Test func aClosedConnectionIsNotTakenForRoot() throws {
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let setup = try LocationAttack.Setup(log: log)
        let attacker = try TestUser("larootmis")
        let burst = try attacker.python("""
            import json, socket, sys, time
            opened = 0
            # Three bursts, past the endpoint's 2 s memory of each uid's answer.
            for burst in range(3):
                for _ in range(300):
                    try:
                        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
                        s.close()
                        opened += 1
                    except OSError:
                        pass
                time.sleep(2.2)
            print(json.dumps({"opened": opened}))
            """, [String(setup.endpointPort)])
        #expect(burst.status == 0, "\(burst.stderr)")
        usleep(2_500_000)
        let ledger = try Ledger(path: setup.daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly,
                                journal: .disabled)
        let refusals = try ledger.events().map(\.event).filter { $0.type == .refused && $0.details["operation"] == "location" }
        let actors = Set(refusals.compactMap(\.actor?.uid))
        #expect(actors.isSubset(of: [attacker.uid]), "refusals audited for uids \(actors.sorted()): \(refusals)")
    }
}

/// Findings of the hostile review that are fixed now, and the attacks on the pushes.
extension LocationAttackTests {
    /// Finding 6 (fixed): one granted user slowed the endpoint for everyone. It holds its
    /// 16 connections with WATCH on, never reading, and from four threads connects, sends
    /// `?POLL;` 600 times (answered with 600 POLL reports built on the one loop thread)
    /// and closes, as fast as it can. Measured before the fix: another user's
    /// connect-to-first-TPV went from 0.5 s at worst to 1.5-2.5 s, and now and then one
    /// attempt got nothing in 5 s. Now one person's commands are answered at 20 a second
    /// across all their connections (after a burst of 40) and the rest wait unread.
    @Test func aFloodingUserDoesNotStarveOthers() throws {
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let setup = try LocationAttack.Setup(log: log)
        let attacker = try TestUser("laflood")
        let victim = try TestUser("lafloodv")
        try setup.grant(attacker, .city)
        try setup.grant(victim, .street)
        let flood = try attacker.background("""
            import json, socket, sys, threading, time
            port = int(sys.argv[1])
            held = []
            for _ in range(40):
                try:
                    s = socket.create_connection(("127.0.0.1", port))
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.sendall(b'?WATCH={"enable":true};' + b'?POLL;' * 600)
                    held.append(s)
                except OSError:
                    pass
            def churn():
                while True:
                    try:
                        s = socket.create_connection(("127.0.0.1", port))
                        s.sendall(b'?POLL;' * 600)
                        s.close()
                    except OSError:
                        time.sleep(0.001)
            for _ in range(int(sys.argv[2])):
                threading.Thread(target=churn, daemon=True).start()
            time.sleep(1)
            print(json.dumps({"held": len(held)}), flush=True)
            while True:
                for s in held:
                    try:
                        s.send(b'?POLL;' * 600)
                    except OSError:
                        pass
                time.sleep(0.05)
            """, [String(setup.endpointPort), "4"])
        defer { flood.stop() }
        #expect((flood.report["held"] as? Int ?? 0) >= 16, "\(flood.report)")
        let probe = try victim.python("""
            import json, socket, sys, time
            failures, worst = [], 0.0
            for attempt in range(20):
                start = time.monotonic()
                stage = "connect"
                try:
                    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
                    stage = f"first TPV (connected in {time.monotonic() - start:.2f} s)"
                    s.sendall(b'?WATCH={"enable":true};')
                    buffer = b""
                    while b'"class":"TPV"' not in buffer:
                        chunk = s.recv(65536)
                        if not chunk:
                            raise OSError("closed")
                        buffer += chunk
                    s.close()
                except OSError as error:
                    failures.append(f"{attempt}: {error!r} waiting for {stage} after {time.monotonic() - start:.1f} s")
                worst = max(worst, time.monotonic() - start)
            print(json.dumps({"failures": failures, "worst": worst}))
            """, [String(setup.endpointPort)])
        let outcome = try json(probe.stdout)
        #expect((outcome["failures"] as? [String])?.isEmpty == true, "\(outcome) \(probe.stderr)")
        let unix = try setup.location(victim)
        #expect(unix.status == 0 && unix.json["accuracy"] as? String == "street", "\(unix.stderr)")
        #expect(setup.daemon.process.isRunning)
    }

    /// The rate itself: one connection sending 1,000 `?POLL;` at once gets the burst and
    /// then 20 a second, never all 1,000 (before the fix it got every one at once).
    @Test func oneUsersCommandsAreAnsweredAtTheirRate() throws {
        let setup = try LocationAttack.Setup(log: LocationAttackTests.fixture)
        let user = try TestUser("larate")
        try setup.grant(user, .city)
        let result = try user.python("""
            import json, socket, sys, time
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2)
            start = time.monotonic()
            s.sendall(b'?POLL;' * 1000)
            buffer, polls = b"", 0
            while time.monotonic() - start < 3:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                buffer += chunk
                polls += buffer.count(b'"class":"POLL"')
                buffer = buffer[buffer.rfind(b"\\n") + 1:]
            print(json.dumps({"polls": polls, "elapsed": time.monotonic() - start}))
            """, [String(setup.endpointPort)])
        let outcome = try json(result.stdout)
        let polls = outcome["polls"] as? Int ?? -1
        let elapsed = outcome["elapsed"] as? Double ?? 0
        let limits = GpsdCompatibleServer.Limits()
        // The burst, the rate over the time measured, and one more second of slack.
        let most = limits.commandBurst + Int((elapsed + 1) * Double(limits.commandsPerSecond))
        #expect(polls > limits.commandBurst && polls <= most, "\(outcome) (at most \(most)) \(result.stderr)")
    }

    /// A watching client of a user whose grant is revoked is told and closed as soon as the
    /// ledger commits the revoke, not at the next periodic look (set to 10 minutes here, so
    /// only the push can end it).
    @Test func aRevokeEndsAWatchingConnectionAtOnce() throws {
        let setup = try LocationAttack.Setup(log: LocationAttackTests.fixture, daemonArguments: ["--location-recheck", "600"])
        let user = try TestUser("larevnow")
        try setup.grant(user, .street)
        let watcher = try user.background("""
            import json, socket, sys, time
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            s.sendall(b'?WATCH={"enable":true};')
            buffer, told = b"", False
            while b'"class":"TPV"' not in buffer:
                buffer += s.recv(65536)
            print(json.dumps({"watching": True}), flush=True)
            buffer = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buffer += chunk
            print(json.dumps({"closed": True, "error": b'"class":"ERROR"' in buffer,
                              "at": time.monotonic()}), flush=True)
            """, [String(setup.endpointPort)])
        defer { watcher.stop() }
        #expect(watcher.report["watching"] as? Bool == true, "\(watcher.report)")
        let revoked = try TestProcess.devaccess(["revoke", "location", "--user", user.name] + setup.socket)
        #expect(revoked.status == 0, "\(revoked.stderr)")
        let closed = try #require(try watcher.nextReport(timeout: 10), "still served 10 s after the revoke")
        #expect(closed["closed"] as? Bool == true && closed["error"] as? Bool == true, "\(closed)")
    }
}

/// Findings of the hostile review that are fixed now: the attacks, run in CI.
extension LocationAttackTests {
    /// Finding 1 (fixed): a rounded altitude flipped between two values with receiver noise
    /// across a rounding edge, and the share of each said the true altitude to within a
    /// metre. Here the receiver stands still at 105 m ± 2 m: a street client is served no
    /// altitude at all now, so there is nothing to average.
    @Test func altitudeNoiseAcrossARoundingEdgeIsServedAsOneValue() throws {
        let noise: [Double] = [-1.5, 1.8, -0.7, 2.0, 0.4, -1.9, 1.1, -0.2, 1.6, -1.2]
        let log = try LocationAttack.log((0..<40).map { (48.1173, 11.516666667, 105.3 + noise[$0 % noise.count]) })
        defer { unlink(log) }
        let setup = try LocationAttack.Setup(log: log)
        let user = try TestUser("laalt")
        try setup.grant(user, .street)
        let served = try LocationAttack.watch(user, port: setup.endpointPort, reports: 30, seconds: 40)
        let altitudes = served.tpv.compactMap { $0["altMSL"] as? Double }
        #expect(served.tpv.count >= 20, "\(served)")
        let average = altitudes.reduce(0, +) / Double(max(1, altitudes.count))
        #expect(Set(altitudes).count <= 1 && served.tpv.allSatisfy { $0["alt"] == nil },
                "served altitudes \(Set(altitudes).sorted()), averaging to \(average) m (truth 105.3 m)" as Comment)
    }

    /// Finding 2: the levels' grids are not nested (each row's columns are counted from its
    /// own centre latitude), so a neighborhood grant that also asks `--accuracy city` learns
    /// which side of a city column edge it is on: the answers together place it in a part
    /// of the neighborhood cell. Here the receiver is 48.12 N 11.376 E, in a neighborhood
    /// cell that a city column edge (11.37196 E) cuts at 60 %: the city answer should say
    /// nothing the neighborhood answer does not.
    @Test func aCoarserLevelSaysNothingMoreThanTheGrantedOne() throws {
        let log = try LocationAttack.log((0..<30).map { _ in (48.12, 11.376, 500) })
        defer { unlink(log) }
        let setup = try LocationAttack.Setup(log: log)
        let user = try TestUser("lanest")
        try setup.grant(user, .neighborhood)
        let fine = try setup.location(user)
        let coarse = try setup.location(user, ["--accuracy", "city"])
        let latitude = try #require(fine.json["latitude"] as? Double, "\(fine.stderr)")
        let longitude = try #require(fine.json["longitude"] as? Double)
        let cityLatitude = try #require(coarse.json["latitude"] as? Double, "\(coarse.stderr)")
        let cityLongitude = try #require(coarse.json["longitude"] as? Double)
        // The neighborhood cell the answer names, from the grid's public geometry.
        let neighborhood = LocationGrid(cellMeters: 1_000)
        let city = LocationGrid(cellMeters: 10_000)
        let cell = neighborhood.cell(latitude: latitude, longitude: longitude)
        let halfWidth = neighborhood.columnWidth(row: cell.row) / 2
        let halfHeight = neighborhood.rowHeight / 2
        let servedCity = city.cell(latitude: cityLatitude, longitude: cityLongitude)
        // Every corner of the neighborhood cell (a hair inside) in the city cell served.
        var outside: [String] = []
        for dy in [-1.0, 1.0] {
            for dx in [-1.0, 1.0] {
                let corner = (latitude + dy * halfHeight * 0.999, longitude + dx * halfWidth * 0.999)
                if city.cell(latitude: corner.0, longitude: corner.1) != servedCity {
                    outside.append(String(format: "%.5f,%.5f", corner.0, corner.1))
                }
            }
        }
        let narrowed = "corners \(outside) of the neighborhood cell around \(latitude),\(longitude) are outside "
            + "the city cell served (\(cityLatitude),\(cityLongitude)): the two answers narrow the position"
        #expect(outside.isEmpty, Comment(rawValue: narrowed))
    }

    /// Finding 5: the hysteresis margin is a fixed quarter cell (25 m at street), not tied to
    /// how noisy the receiver is. A receiver standing still indoors or between buildings
    /// wanders ±40 m (gpsd's own eph says so): at street level it flips between two cells
    /// every few seconds, and the share of time in each says where the edge lies relative
    /// to the mean position, the averaging the grid was meant to stop. Here the receiver
    /// stands 5 m north of a street row edge and wanders ±45 m north-south, slowly.
    @Test func aNoisyReceiverStandingStillIsServedOneStreetCell() throws {
        let grid = LocationGrid(cellMeters: 100)
        let row = grid.cell(latitude: 48.1173, longitude: 11.516666667).row
        let edge = -90 + Double(row) * grid.rowHeight
        let wander: [Double] = [5, 25, 40, 50, 35, 15, -5, -25, -35, -40, -30, -10]
        let log = try LocationAttack.log((0..<48).map { second in
            (edge + (5 + wander[second % wander.count]) / 111_320, 11.516666667, 545)
        })
        defer { unlink(log) }
        let setup = try LocationAttack.Setup(log: log)
        let user = try TestUser("lanoise")
        try setup.grant(user, .street)
        let served = try LocationAttack.watch(user, port: setup.endpointPort, reports: 36, seconds: 40)
        let latitudes = served.tpv.compactMap { $0["lat"] as? Double }
        #expect(latitudes.count >= 24, "\(served)")
        let flips = zip(latitudes, latitudes.dropFirst()).filter { $0 != $1 }.count
        let north = latitudes.filter { $0 > edge }.count
        #expect(Set(latitudes).count == 1,
                "\(flips) changes of cell in \(latitudes.count) reports, \(north) north of the edge" as Comment)
    }

    /// Finding 3: devaccessd trusts whatever listens on gpsd's port. gpsd's port (2947) is
    /// not privileged, so while gpsd is not running (not installed, stopped, restarting,
    /// socket activation off) any user can listen there and devaccessd serves that user's
    /// made-up position to every granted program, at every level. The safe behaviour:
    /// devaccessd does not take positions from a gpsd whose socket an unprivileged user owns.
    @Test func aUserListeningOnGpsdsPortIsNotTakenForGpsd() throws {
        let port = try freeLoopbackPort()
        let squatter = try TestUser("lasquat")
        let victim = try TestUser("lasquatv")
        let fake = try squatter.background("""
            import json, socket, sys, threading, time
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("127.0.0.1", int(sys.argv[1])))
            srv.listen(8)
            print(json.dumps({"listening": True}), flush=True)
            def serve(c):
                try:
                    c.sendall(b'{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\\n')
                    c.recv(4096)
                    c.sendall(b'{"class":"DEVICES","devices":[{"class":"DEVICE","path":"/dev/ttyACM0",'
                              b'"driver":"u-blox","activated":"2026-11-30T21:00:00.000Z"}]}\\n')
                    c.sendall(b'{"class":"WATCH","enable":true,"json":true}\\n')
                    while True:
                        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
                        c.sendall(json.dumps({"class": "TPV", "device": "/dev/ttyACM0", "mode": 3, "time": now,
                                              "lat": 51.500729, "lon": -0.124625, "altMSL": 12.0}).encode() + b"\\n")
                        time.sleep(0.2)
                except OSError:
                    pass
            while True:
                c, _ = srv.accept()
                threading.Thread(target=serve, args=(c,), daemon=True).start()
            """, [String(port)])
        defer { fake.stop() }
        let daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(port)", "--gpsd-timeout", "2000"])
        #expect(try TestProcess.devaccess(["grant", "location", "--user", victim.name, "--socket", daemon.socketPath])
                    .status == 0)
        let result = try victim.devaccess(["location", "--json", "--wait", "5s", "--socket", daemon.socketPath])
        let served = result.status == 0 ? try json(result.stdout) : [:]
        #expect(served["latitude"] as? Double != 51.500729,
                "devaccessd served \(squatter.name)'s made-up position to \(victim.name): \(result.stdout)")
    }

    /// Finding 4 (fixed by the default): a user who listened first on the endpoint's port
    /// while devaccessd was down got its clients. The default port (947) is below 1024: a
    /// user cannot listen there at all (an administrator who picks a port of 1024 or more
    /// takes that risk back; devaccessd(8) says so).
    @Test func aUserCannotListenOnTheEndpointsDefaultPort() throws {
        let squatter = try TestUser("laepsq")
        let tried = try squatter.python("""
            import socket
            for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
                s = socket.socket(family)
                try:
                    s.bind((host, 947))
                    print("bound")
                except PermissionError:
                    print("refused")
            """)
        #expect(tried.stdout.split(separator: "\n") == ["refused", "refused"], "\(tried.stdout) \(tried.stderr)")
        #expect(DaemonOptions().locationPort == 947)
    }

    /// Finding 9: every limit keyed by uid (the endpoint's 16 clients per user, its 2 s
    /// memory of each uid's answer, the broker's refusal budget of 20 a minute) counts a
    /// user's subordinate uids (/etc/subuid, which useradd hands every new user, 65,536 of
    /// them) as other people: through newuidmap (`unshare -r --map-users=...`) a user makes
    /// sockets owned by any of them, and sock_diag names those uids. Here one user
    /// connects once from each of 200 of its subordinate uids: 200 refusals go into the
    /// audit within a second, where one uid gets 20 a minute. Safe: what one person can
    /// write into the audit stays within one person's budget.
    @Test func subordinateUidsDoNotMultiplyOneUsersBudget() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/newuidmap") else {
            Issue.record("newuidmap is not installed: apt-get install uidmap")
            return
        }
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let setup = try LocationAttack.Setup(log: log)
        let attacker = try TestUser("lasubuid")
        let first = 300_000_000 + (attacker.uid % 100_000) * 1_000
        let range = "\(first)-\(first + 999)"
        let added = try TestProcess.run("/usr/sbin/usermod", ["--add-subuids", range, "--add-subgids", range, attacker.name])
        #expect(added.status == 0, "\(added.stderr)")
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", range, "--del-subgids", range, attacker.name]) }
        let flood = try attacker.run("/usr/bin/unshare", ["--map-root-user", "--map-users=\(first),1,999",
                                                          "--map-groups=\(first),1,999", "--", "/usr/bin/python3", "-c", """
            import json, os, socket, sys
            refused = 0
            for k in range(1, 201):
                os.seteuid(k)
                s = socket.socket()
                os.seteuid(0)
                s.settimeout(5)
                try:
                    s.connect(("127.0.0.1", int(sys.argv[1])))
                    if b"no location grant" in s.recv(4096):
                        refused += 1
                except OSError:
                    pass
                s.close()
            print(json.dumps({"refused": refused}))
            """, String(setup.endpointPort)])
        #expect(flood.status == 0, "\(flood.stderr)")
        let ledger = try Ledger(path: setup.daemon.stateDirectory + "/" + Ledger.fileName, mode: .readOnly,
                                journal: .disabled)
        let refusals = try ledger.events().map(\.event).filter { $0.type == .refused && $0.details["operation"] == "location" }
        let uids = Set(refusals.compactMap(\.actor?.uid))
        #expect(refusals.count <= 20,
                "\(refusals.count) refusals from \(uids.count) uids (\(uids.min() ?? 0)...\(uids.max() ?? 0)), one person: \(flood.stdout)")
    }

    /// Finding 10 (the same hole, broker-wide): the Unix socket's 256 connections per user
    /// are per uid too. From four subordinate uids one user holds 1,000 idle connections,
    /// past the 960 unprivileged slots, and nobody else is served. Safe: another user is
    /// still answered.
    @Test func subordinateUidsDoNotFillTheBrokersConnections() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/newuidmap") else {
            Issue.record("newuidmap is not installed: apt-get install uidmap")
            return
        }
        let daemon = try RunningDaemon()
        let attacker = try TestUser("lasubcon")
        let victim = try TestUser("lasubconv")
        let first = 300_000_000 + (attacker.uid % 100_000) * 1_000
        let range = "\(first)-\(first + 999)"
        let added = try TestProcess.run("/usr/sbin/usermod", ["--add-subuids", range, "--add-subgids", range, attacker.name])
        #expect(added.status == 0, "\(added.stderr)")
        defer { _ = try? TestProcess.run("/usr/sbin/usermod", ["--del-subuids", range, "--del-subgids", range, attacker.name]) }
        // Inside a user namespace where the user is 0 and its subordinate uids are 1...999.
        let holder = try attacker.background("""
            import subprocess, sys
            script = '''
            import json, os, resource, socket, sys, time
            resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
            held = []
            for k in range(1, 5):
                for _ in range(250):
                    os.seteuid(k)
                    try:
                        s = socket.socket(socket.AF_UNIX)
                        s.connect(sys.argv[1])
                        held.append(s)
                    except OSError:
                        pass
                    finally:
                        os.seteuid(0)
            print(json.dumps({"held": len(held)}), flush=True)
            time.sleep(120)
            '''
            first = sys.argv[2]
            subprocess.run(["/usr/bin/unshare", "--map-root-user", f"--map-users={first},1,999",
                            f"--map-groups={first},1,999", "--", "/usr/bin/python3", "-c", script, sys.argv[1]])
            """, [daemon.socketPath, String(first)])
        defer { holder.stop() }
        #expect((holder.report["held"] as? Int ?? 0) >= 960, "\(holder.report)")
        let answered = try victim.devaccess(["status", "location", "--broker", "--socket", daemon.socketPath])
        #expect(!answered.stderr.contains("connections"), "\(answered.status): \(answered.stderr)")
    }
}
