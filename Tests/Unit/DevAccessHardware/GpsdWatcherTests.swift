import Testing
import Foundation
import Glibc
import Synchronization
import DevAccessCore
import DevAccessHardware
import DevAccessTestSupport

/// The broker's standing gpsd client against a real gpsd (gpsfake on loopback, killed and
/// restarted under it) and against scripted and misbehaving loopback servers.
///
/// Time bounds here are generous correctness bounds ("reconnects within 15 s", "stop
/// returns within a second"), not speed measurements; measured figures are printed
/// with a [gpsd-timing] prefix.
@Suite(.serialized)
struct GpsdWatcherTests {
    /// Long enough for gpsd to identify the receiver and report on a loaded machine.
    static let patience: Duration = .seconds(15)
    /// Fast retries, so that "keeps retrying" shows within a test.
    static let quickBackoff: (first: Duration, max: Duration) = (.milliseconds(50), .milliseconds(200))

    // MARK: Real gpsd

    /// gpsd with a 3D fix: the watcher serves the log's position with gpsd's other fields.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func fixFromGpsd() throws {
        let gpsd = try GpsFakeProcess(log: fixture("fix-3d.nmea"))
        defer { gpsd.stop() }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: gpsd.port))
        try watcher.start()
        defer { watcher.stop() }

        let fix = try #require(watcher.waitForFix(timeout: Self.patience), "\(watcher.snapshot())")
        // gpsd's first TPVs of a fix lack altitude and climb; wait for a complete one.
        let complete = try #require(waitUntil(watcher) { $0.bestFix?.altitude != nil && $0.bestFix?.climb != nil },
                                    "\(watcher.snapshot())")
        let best = try #require(complete.bestFix)
        // gpsd's first fix may be 2D (under load the GSA comes later); the complete one is 3D.
        #expect(fix.mode >= 2 && fix.accuracy == .exact, "\(fix)")
        #expect(abs((fix.latitude ?? 0) - 48.1173) < 1e-6 && abs((fix.longitude ?? 0) - 11.516666667) < 1e-6, "\(fix)")
        for fix in [best] {
            #expect(fix.mode == 3 && fix.accuracy == .exact)
            // 48°07.038' N, 11°31.000' E in the NMEA log.
            #expect(abs((fix.latitude ?? 0) - 48.1173) < 1e-6 && abs((fix.longitude ?? 0) - 11.516666667) < 1e-6,
                    "\(fix)")
            #expect(fix.time?.hasPrefix("2024-06-15T12:00:") == true, "\(fix)")
            #expect(fix.track == 84.4 && fix.speed == 0, "\(fix)")
            #expect(fix.horizontalError != nil && fix.horizontalError ?? 0 > 0, "\(fix)")
        }
        // GGA's altitude above mean sea level, not gpsd's altHAE (592.3).
        #expect(best.altitude == 545.4 && best.climb == 0 && best.verticalError != nil, "\(best)")
        #expect(complete.connected && complete.problem == nil && complete.release?.isEmpty == false)
        let receiver = try #require(complete.receivers.first { $0.path == best.device })
        #expect(receiver.driver == "NMEA0183" && receiver.isActive && receiver.fix.mode == .threeD)
        #expect(complete.fixes.allSatisfy { fix in complete.receivers.contains { $0.path == fix.device } })
        #expect(complete.fixReceived[receiver.path] != nil)

        // How soon a waiting reader has each new fix after the watcher read it.
        var lags: [Duration] = []
        var seen = complete.generation
        while lags.count < 5, let state = watcher.waitForChange(after: seen, timeout: .seconds(5)) {
            let woke = ContinuousClock.now
            seen = state.generation
            if let received = state.fixReceived[receiver.path] { lags.append(woke - received) }
        }
        print("[gpsd-timing] watcher: fix read -> waiting reader woken: \(lags)")

        let (_, elapsed) = timed { watcher.stop() }
        print("[gpsd-timing] watcher: stop() while connected to gpsd: \(elapsed)")
        #expect(elapsed < .seconds(1))
        let stopped = watcher.snapshot()
        #expect(!stopped.connected && stopped.fixes.isEmpty && stopped.receivers.isEmpty && stopped.bestFix == nil)
        #expect(stopped.problem?.contains("stopped watching") == true)
    }

    /// A receiver that talks without a fix: mode 1, no position, nothing for waitForFix.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func noFixFromGpsd() throws {
        let gpsd = try GpsFakeProcess(log: fixture("no-fix.nmea"))
        defer { gpsd.stop() }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: gpsd.port))
        try watcher.start()
        defer { watcher.stop() }

        let state = try #require(waitUntil(watcher) { $0.fixes.contains { $0.mode == 1 } }, "\(watcher.snapshot())")
        let fix = try #require(state.fixes.first)
        #expect(fix.latitude == nil && fix.longitude == nil && fix.altitude == nil && !fix.hasPosition)
        #expect(state.bestFix == nil && watcher.bestFix() == nil)
        #expect(state.receivers.first?.fix.mode == .noFix)
        #expect(watcher.waitForFix(timeout: .milliseconds(500)) == nil)
    }

    /// SKY reports are kept as gpsd sent them, per receiver.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func skyKeptVerbatim() throws {
        let gpsd = try GpsFakeProcess(log: fixture("fix-3d-sky.nmea"))
        defer { gpsd.stop() }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: gpsd.port))
        try watcher.start()
        defer { watcher.stop() }

        // gpsd may first see the log from its second GSV sentence (it started reading
        // mid-cycle) and report that half-sky: wait for a whole cycle's SKY, kept verbatim.
        let state = try #require(waitUntil(watcher) { $0.sky.contains { $0.value.contains("\"PRN\":4,") } },
                                 "\(watcher.snapshot())")
        let (device, line) = try #require(state.sky.first)
        #expect(state.receivers.map(\.path) == [device])
        #expect(line.hasPrefix("{\"class\":\"SKY\",\"device\":\"\(device)\"") && !line.contains("\n"), "\(line)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let satellites = try #require(object["satellites"] as? [[String: Any]])
        #expect(satellites.compactMap { $0["PRN"] as? Int }.sorted() == [4, 5, 9, 12, 17, 24, 25, 29])
    }

    /// gpsd killed mid-stream: the watcher says so and serves no position; a new gpsd on
    /// the same port is found again and its fix served.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func gpsdRestartIsFollowed() throws {
        let first = try GpsFakeProcess(log: fixture("fix-3d.nmea"))
        var firstRunning = true
        defer { if firstRunning { first.stop() } }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: first.port),
                                  backoff: (.milliseconds(100), .seconds(1)))
        let events = EventRecorder()
        watcher.setChangeHandler { events.append($0) }
        try watcher.start()
        defer { watcher.stop() }

        let fix = try #require(watcher.waitForFix(timeout: Self.patience), "\(watcher.snapshot())")
        let device = try #require(fix.device)
        first.stop()
        firstRunning = false

        let down = try #require(waitUntil(watcher) { !$0.connected }, "\(watcher.snapshot())")
        let problem = try #require(down.problem)
        #expect(problem.contains("127.0.0.1:\(first.port)"), "\(problem)")
        #expect(down.fixes.isEmpty && down.receivers.isEmpty && down.sky.isEmpty && down.bestFix == nil)
        #expect(watcher.bestFix() == nil)
        // While nothing listens, the problem says so.
        let refused = try #require(waitUntil(watcher) { $0.problem?.contains("connection refused") == true },
                                   "\(watcher.snapshot())")
        #expect(!refused.connected && refused.bestFix == nil)

        let second = try GpsFakeProcess(log: fixture("fix-3d.nmea"), port: first.port)
        defer { second.stop() }
        let restarted = ContinuousClock.now
        // A new gpsd may first report 2D (a GGA before the cycle's GSA): the receiver's 3D fix follows.
        let again = try #require(waitUntil(watcher) { $0.bestFix?.mode == 3 }?.bestFix, "\(watcher.snapshot())")
        print("[gpsd-timing] watcher: new gpsd listening -> fix served: \(ContinuousClock.now - restarted)")
        #expect(again.mode == 3 && abs((again.latitude ?? 0) - 48.1173) < 1e-6, "\(again) \(watcher.snapshot())")
        #expect(watcher.snapshot().connected && watcher.snapshot().problem == nil)

        // The handler hears of a change just after the state has it (outside the lock): the
        // 3D fix's event may still be on its way when the state shows it.
        let deadline = ContinuousClock.now.advanced(by: Self.patience)
        var seen = events.all
        while !seen.contains(where: { if case .fixModeChanged(device, _, .threeD) = $0 { true } else { false } }),
              ContinuousClock.now < deadline {
            usleep(10_000)
            seen = events.all
        }
        let connects = seen.filter { if case .connected = $0 { return true } else { return false } }
        #expect(connects.count >= 2, "\(seen)")
        #expect(seen.contains(.receiverAdded(path: device)) && seen.contains(.receiverRemoved(path: device)), "\(seen)")
        #expect(seen.contains { if case .disconnected(let why) = $0 { why == problem } else { false } }, "\(seen)")
        // The first fix is an event: 2D or 3D, depending on where in the NMEA cycle gpsd
        // first had a position, and the log's 3D comes in any case.
        let firstFix = try #require(seen.firstIndex { if case .fixModeChanged = $0 { true } else { false } })
        if case .fixModeChanged(let path, let from, let to) = seen[firstFix] {
            #expect(path == device && !from.hasFix && to.hasFix, "\(seen)")
        }
        #expect(seen.contains { if case .fixModeChanged(device, _, .threeD) = $0 { true } else { false } }, "\(seen)")
    }

    // MARK: Scripted gpsd (exact reports)

    static let banner = scriptBanner
    static let watch = "{\"class\":\"WATCH\",\"enable\":true,\"json\":true}\n"
    static let devicesACM7 = scriptDevices
    static let noDevices = "{\"class\":\"DEVICES\",\"devices\":[]}\n"
    /// Announces a receiver; sent last in a script, its event says the script was read.
    static func device(_ path: String, activated: String = "\"2024-06-15T12:00:09.000Z\"") -> String {
        "{\"class\":\"DEVICE\",\"path\":\"\(path)\",\"activated\":\(activated)}\n"
    }

    /// Every TPV field the fix carries; a TPV without "device" belongs to the only
    /// receiver; mode 0 does not replace a fix; SKY is kept byte for byte.
    @Test func scriptedReportsMakeTheFix() throws {
        let sky = "{\"class\":\"SKY\",\"device\":\"/dev/ttyACM7\",\"hdop\":1.3,\"satellites\":[{\"PRN\":4,\"used\":true}]}"
        let script = Self.banner + Self.devicesACM7 + Self.watch
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":0}\n"
            + "{\"class\":\"TPV\",\"mode\":3,\"time\":\"2024-06-15T12:00:01.000Z\",\"lat\":48.1173,\"lon\":11.516666667,"
            + "\"altHAE\":592.3,\"altMSL\":545.4,\"alt\":545.0,\"speed\":1.5,\"track\":84.4,\"climb\":-0.25,"
            + "\"eph\":7.5,\"epx\":3.0,\"epy\":4.0,\"epv\":9.0,\"magvar\":-3.1}\n"
            + sky + "\n"
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":0}\n"
            + Self.device("/dev/ttyUSB1")
        let (watcher, server, events) = try start(script)
        defer { watcher.stop(); server.stop() }
        let state = try #require(waitUntil(watcher) { $0.receivers.count == 2 && events.all.count == 4 },
                                 "\(watcher.snapshot()), \(events.all)")

        let expected = LocationFix(device: "/dev/ttyACM7", mode: 3, time: "2024-06-15T12:00:01.000Z",
                                   latitude: 48.1173, longitude: 11.516666667, altitude: 545.4, speed: 1.5,
                                   track: 84.4, climb: -0.25, horizontalError: 7.5, verticalError: 9.0,
                                   accuracy: .exact)
        #expect(state.fixes == [expected])
        #expect(state.bestFix == expected && watcher.bestFix() == expected)
        #expect(state.sky == ["/dev/ttyACM7": sky])
        #expect(state.release == "3.22" && state.connected && state.problem == nil)
        #expect(state.receivers == [
            GpsdReceiver(path: "/dev/ttyACM7", driver: "u-blox", activated: "2024-06-15T12:00:00.000Z",
                         fix: GpsdFix(mode: .threeD, latitude: 48.1173, longitude: 11.516666667)),
            GpsdReceiver(path: "/dev/ttyUSB1", activated: "2024-06-15T12:00:09.000Z"),
        ])
        #expect(events.all == [.connected(release: "3.22"), .receiverAdded(path: "/dev/ttyACM7"),
                               .fixModeChanged(device: "/dev/ttyACM7", from: .notReported, to: .threeD),
                               .receiverAdded(path: "/dev/ttyUSB1")])
    }

    /// Without eph the horizontal error comes from epx/epy; 2D has no altitude; a TPV of a
    /// receiver gpsd never listed is ignored; a receiver gpsd closes takes its fix and SKY
    /// with it; with two receivers a TPV without "device" belongs to neither.
    @Test func scriptedReceiverComesAndGoes() throws {
        let script = Self.banner + Self.noDevices + Self.watch + Self.device("/dev/ttyACM7")
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":2,\"lat\":-33.86,\"lon\":151.21,"
            + "\"alt\":12.0,\"epx\":3.0,\"epy\":4.0,\"epv\":5.0}\n"
            + "{\"class\":\"SKY\",\"device\":\"/dev/ttyACM7\",\"satellites\":[]}\n"
            + "{\"class\":\"TPV\",\"device\":\"/dev/unlisted\",\"mode\":3,\"lat\":1.0,\"lon\":2.0}\n"
            + Self.device("/dev/ttyUSB2")
            + "{\"class\":\"TPV\",\"mode\":3,\"lat\":5.0,\"lon\":6.0}\n"
            + Self.device("/dev/ttyACM7", activated: "0")
            + Self.device("/dev/ttyUSB3")
        let (watcher, server, events) = try start(script)
        defer { watcher.stop(); server.stop() }
        let state = try #require(waitUntil(watcher) { state in
            state.receivers.contains { $0.path == "/dev/ttyUSB3" } && events.all.count == 6
        }, "\(watcher.snapshot()), \(events.all)")
        #expect(state.receivers.map(\.path) == ["/dev/ttyUSB2", "/dev/ttyUSB3"])
        #expect(state.fixes.isEmpty && state.sky.isEmpty && state.fixReceived.isEmpty && state.bestFix == nil)
        #expect(events.all == [.connected(release: "3.22"), .receiverAdded(path: "/dev/ttyACM7"),
                               .fixModeChanged(device: "/dev/ttyACM7", from: .notReported, to: .twoD),
                               .receiverAdded(path: "/dev/ttyUSB2"), .receiverRemoved(path: "/dev/ttyACM7"),
                               .receiverAdded(path: "/dev/ttyUSB3")])
        // The fix as it was when its event came (the handler runs before the next report).
        let fix = try #require(events.fixes.first)
        #expect(fix == LocationFix(device: "/dev/ttyACM7", mode: 2, latitude: -33.86, longitude: 151.21,
                                   horizontalError: 5.0, accuracy: .exact))
    }

    /// A receiver that loses its fix (mode 1 after 3D) has no position any more.
    @Test func scriptedFixLost() throws {
        let script = Self.banner + Self.devicesACM7 + Self.watch
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":3,\"lat\":1.5,\"lon\":2.5,\"altMSL\":3.0}\n"
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":1,\"lat\":1.5,\"lon\":2.5}\n"
            + Self.device("/dev/ttyUSB1")
        let (watcher, server, events) = try start(script)
        defer { watcher.stop(); server.stop() }
        let state = try #require(waitUntil(watcher) { $0.receivers.count == 2 && events.all.count == 5 },
                                 "\(watcher.snapshot()), \(events.all)")
        #expect(state.fixes.map(\.mode) == [1] && state.fixes.first?.latitude == nil && state.bestFix == nil)
        #expect(events.all.contains(.fixModeChanged(device: "/dev/ttyACM7", from: .threeD, to: .noFix)))
        #expect(watcher.waitForFix(timeout: .milliseconds(200)) == nil)
    }

    /// A peer that announces receiver after receiver does not grow the state without bound.
    @Test func receiverCountIsCapped() throws {
        let script = Self.banner + Self.noDevices + Self.watch
            + (0..<1000).map { Self.device("/dev/fake\($0)") }.joined()
            + "{\"class\":\"TPV\",\"device\":\"/dev/fake999\",\"mode\":3,\"lat\":1.0,\"lon\":2.0}\n"
            + "{\"class\":\"DEVICE\",\"path\":\"/dev/fake0\",\"activated\":0}\n"
            + Self.device("/dev/last")
        let (watcher, server, events) = try start(script)
        defer { watcher.stop(); server.stop() }
        let state = try #require(waitUntil(watcher) { state in
            state.receivers.contains { $0.path == "/dev/last" } && events.all.count == 35
        }, "\(watcher.snapshot().receivers.count) receivers, \(events.all.count) events")
        #expect(state.receivers.count == 32 && state.fixes.isEmpty)
        #expect(events.all.count == 1 + 32 + 2)
    }

    /// waitForChange hands each new state to a waiting reader as it happens.
    @Test func waitForChangeWakesOnEachReport() throws {
        let script = Self.banner + Self.devicesACM7 + Self.watch
        let (watcher, server, _) = try start(script)
        defer { watcher.stop(); server.stop() }
        let listed = try #require(waitUntil(watcher) { $0.receivers.count == 1 })
        // Nothing more comes: the wait ends at its timeout with nil.
        let (quiet, waited) = timed { watcher.waitForChange(after: listed.generation, timeout: .milliseconds(300)) }
        #expect(quiet == nil && waited >= .milliseconds(290))
        // A reader that is behind gets the current state at once.
        let (behind, _) = timed { watcher.waitForChange(after: 0, timeout: .seconds(5)) }
        #expect(behind == listed)
        let stopping = Thread { Thread.sleep(forTimeInterval: 0.2); watcher.stop() }
        stopping.start()
        let next = try #require(watcher.waitForChange(after: listed.generation, timeout: Self.patience))
        #expect(!next.connected && next.generation > listed.generation)
    }

    // MARK: Not gpsd, or gpsd misbehaving

    /// Each way a peer can fail to be gpsd: the problem is recorded and says what
    /// happened, nothing is served, the watcher keeps trying, and stop() is prompt.
    @Test(arguments: [
        ("random bytes", GpsdFakeServer.Behavior.send(randomBytes(count: 2048), thenClose: false), "garbage"),
        ("no banner", .script("{\"class\":\"TPV\",\"mode\":3,\"lat\":1.0,\"lon\":2.0}\n"),
         "not gpsd's VERSION banner"),
        ("silent", .silent, "did not answer within 300 ms"),
        ("banner then silent", .script(scriptBanner), "device list (DEVICES) never came"),
        ("closes at once", .send([], thenClose: true), "closed the connection before sending its VERSION banner"),
        ("not JSON mid-stream", .script(scriptBanner + scriptDevices + "hello\n"), "a line that is not JSON"),
        ("1 MiB line mid-stream", .script(scriptBanner + scriptDevices + "{\"class\":\"TPV\",\"tag\":\""
                                              + String(repeating: "a", count: 1 << 20) + "\"}\n"),
         "longer than 64 KiB"),
        ("position off the globe", .script(scriptBanner + scriptDevices
            + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":2,\"lat\":123.0,\"lon\":2.0}\n"),
         "latitude 123.0, which is off the globe"),
        ("gpsd refuses WATCH", .script(scriptBanner + "{\"class\":\"ERROR\",\"message\":\"Unrecognized request\"}\n"),
         "refused the query: Unrecognized request"),
        ("endless line", .endlessLine, "longer than 64 KiB"),
        ("deeply nested JSON", .script(scriptBanner + scriptDevices + "{\"class\":\"SKY\",\"x\":"
                                           + String(repeating: "[", count: 30_000) + String(repeating: "]", count: 30_000)
                                           + "}\n"), "garbage"),
        ("closes mid-stream", .send(Array((scriptBanner + scriptDevices).utf8), thenClose: true), "closed the connection"),
    ] as [(String, GpsdFakeServer.Behavior, String)])
    func misbehavingPeer(kind: String, behavior: GpsdFakeServer.Behavior, expected: String) throws {
        let server = try GpsdFakeServer(behavior)
        defer { server.stop() }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                  handshakeTimeout: .milliseconds(300), backoff: Self.quickBackoff)
        try watcher.start()
        defer { watcher.stop() }

        let state = try #require(waitUntil(watcher) { $0.problem?.contains(expected) == true && server.accepted >= 3 },
                                 "\(kind): \(watcher.snapshot()), \(server.accepted) connections")
        #expect(!state.connected, "\(kind)")
        #expect(state.fixes.isEmpty && state.bestFix == nil && state.sky.isEmpty, "\(kind): \(state)")
        #expect(watcher.bestFix() == nil)
        let (_, elapsed) = timed { watcher.stop() }
        #expect(elapsed < .seconds(1), "\(kind): stop() took \(elapsed)")
    }

    /// A gpsd that closes mid-stream says so in words of its own, not "before the banner".
    @Test func closedMidStreamIsNamed() throws {
        let server = try GpsdFakeServer(.send(Array((Self.banner + Self.devicesACM7).utf8), thenClose: true))
        defer { server.stop() }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                  backoff: Self.quickBackoff)
        let events = EventRecorder()
        watcher.setChangeHandler { events.append($0) }
        try watcher.start()
        defer { watcher.stop() }
        _ = try #require(waitUntil(watcher) { _ in server.accepted >= 3 && events.all.count >= 8 })
        let problem = "gpsd at 127.0.0.1:\(server.port) closed the connection "
            + "(gpsd stopped, restarted or dropped this client)"
        let state = watcher.snapshot()
        #expect(state.problem == problem || state.connected, "\(state)")
        // Each connection: connected, receiver added, then disconnected and the receiver removed.
        #expect(Array(events.all.prefix(4)) == [.connected(release: "3.22"), .receiverAdded(path: "/dev/ttyACM7"),
                                               .disconnected(problem: problem), .receiverRemoved(path: "/dev/ttyACM7")])
    }

    /// Nothing listens and the watcher is in a long back-off: stop() does not wait it out.
    @Test func stopDuringBackoffIsPrompt() throws {
        let port = try freeLoopbackPort()
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: port),
                                  backoff: (.seconds(30), .seconds(60)))
        let events = EventRecorder()
        watcher.setChangeHandler { events.append($0) }
        try watcher.start()
        let state = try #require(waitUntil(watcher) { $0.problem != nil })
        #expect(state.problem?.contains("connection refused") == true, "\(state)")
        let (_, elapsed) = timed { watcher.stop() }
        print("[gpsd-timing] watcher: stop() during back-off: \(elapsed)")
        #expect(elapsed < .seconds(1))
        // One refusal is one event; stopping is another reason, so another event.
        #expect(events.all.count == 2, "\(events.all)")
        watcher.stop()   // idempotent
    }

    /// Twenty start/stop cycles against a server that answers as gpsd leave no descriptor
    /// open, and the watcher can be started again after each stop.
    ///
    /// Other suites open and close descriptors in this process at the same time, so the
    /// process-wide count proves nothing. Judged instead: every descriptor that was open while
    /// a watcher ran (sampled while it was connected) and not before it started must be closed
    /// once it stopped (the watcher's socket and wake pipe are among them); another suite's
    /// descriptor would have to open inside that moment and stay open to the end to be
    /// mistaken for ours.
    @Test func startStopCyclesLeakNoDescriptors() throws {
        let server = try GpsdFakeServer(.send(Array((Self.banner + Self.devicesACM7).utf8), thenClose: false))
        let endpoint = GpsdEndpoint(host: "127.0.0.1", port: server.port)
        var whileRunning: Set<String> = []
        let watcher = GpsdWatcher(endpoint: endpoint, backoff: Self.quickBackoff)
        var longest: Duration = .zero
        for cycle in 0..<20 {
            let before = openDescriptors()
            try watcher.start()
            try watcher.start()   // a second start while running does nothing
            let connected = waitUntil(watcher) { $0.connected && !$0.receivers.isEmpty }
            #expect(connected != nil, "cycle \(cycle): \(watcher.snapshot())")
            whileRunning.formUnion(openDescriptors().subtracting(before))
            let (_, elapsed) = timed { watcher.stop() }
            longest = max(longest, elapsed)
            #expect(!watcher.snapshot().connected)
        }
        // Fresh watchers too, each started and stopped once.
        for cycle in 0..<20 {
            let before = openDescriptors()
            let other = GpsdWatcher(endpoint: endpoint, backoff: Self.quickBackoff)
            try other.start()
            #expect(waitUntil(other) { $0.connected } != nil, "fresh watcher \(cycle): \(other.snapshot())")
            whileRunning.formUnion(openDescriptors().subtracting(before))
            other.stop()
        }
        server.stop()   // it holds the server ends of the connections
        print("[gpsd-timing] watcher: longest stop() of 20 while connected: \(longest)")
        #expect(longest < .seconds(1))
        #expect(server.accepted >= 40)
        // The watcher's own descriptors showed up while it ran (a socket and a wake pipe at least).
        #expect(whileRunning.count >= 2, "seen while running: \(whileRunning.sorted())")
        var left = openDescriptors().intersection(whileRunning)
        for _ in 0..<100 where !left.isEmpty {   // another suite's, if any, closes in time
            usleep(100_000)
            left = openDescriptors().intersection(whileRunning)
        }
        #expect(left.isEmpty, "opened while a watcher ran and not closed: \(left.sorted())")
        // Specific to this test, whatever else runs: no TCP connection to the server is left.
        #expect(!tcpConnections().contains(server.port))
    }

    // MARK: Helpers

    private func start(_ script: String) throws -> (GpsdWatcher, GpsdFakeServer, EventRecorder) {
        let server = try GpsdFakeServer(.send(Array(script.utf8), thenClose: false))
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                  backoff: (.seconds(30), .seconds(60)))
        let events = EventRecorder()
        events.watcher = watcher
        watcher.setChangeHandler { events.append($0) }
        do {
            try watcher.start()
        } catch {
            server.stop()
            throw error
        }
        return (watcher, server, events)
    }
}

private let scriptBanner = "{\"class\":\"VERSION\",\"release\":\"3.22\",\"rev\":\"3.22\",\"proto_major\":3,"
    + "\"proto_minor\":14}\n"
private let scriptDevices = "{\"class\":\"DEVICES\",\"devices\":[{\"class\":\"DEVICE\",\"path\":\"/dev/ttyACM7\","
    + "\"driver\":\"u-blox\",\"activated\":\"2024-06-15T12:00:00.000Z\"}]}\n"

extension GpsdFakeServer.Behavior {
    /// Sends `text` and holds the connection.
    static func script(_ text: String) -> Self { .send(Array(text.utf8), thenClose: false) }
}

/// Waits on the watcher's generation until `condition` holds; nil after `patience`.
/// The handler gets a change's events just after the change is visible, so a condition
/// on recorded events is looked at again every 100 ms.
func waitUntil(_ watcher: GpsdWatcher, timeout: Duration = GpsdWatcherTests.patience,
               _ condition: (GpsdWatchState) -> Bool) -> GpsdWatchState? {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    var state = watcher.snapshot()
    while !condition(state) {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { return nil }
        // Short slices: a condition may also depend on something outside the watcher.
        state = watcher.waitForChange(after: state.generation, timeout: min(remaining, .milliseconds(100)))
            ?? watcher.snapshot()
    }
    return state
}

/// The events a watcher reported, in order, and the fix of each fix change as it was then.
final class EventRecorder: Sendable {
    private let events = Mutex<[GpsdWatchEvent]>([])
    private let fixesSeen = Mutex<[LocationFix]>([])
    private let watcherBox = Mutex<GpsdWatcher?>(nil)

    var watcher: GpsdWatcher? {
        get { watcherBox.withLock { $0 } }
        set { watcherBox.withLock { $0 = newValue } }
    }

    /// Runs on the watcher's thread, right after the change: the state is as the event left it.
    func append(_ event: GpsdWatchEvent) {
        events.withLock { $0.append(event) }
        if case .fixModeChanged(let device, _, _) = event,
           let fix = watcher?.snapshot().fixes.first(where: { $0.device == device }) {
            fixesSeen.withLock { $0.append(fix) }
        }
    }

    var all: [GpsdWatchEvent] { events.withLock { $0 } }
    var fixes: [LocationFix] { fixesSeen.withLock { $0 } }
}

/// This process's open descriptors, as "N -> target".
func openDescriptors() -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return Set(names.map { name in
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)")) ?? "?"
        return "\(name) -> \(target)"
    })
}

/// Remote ports of the TCP connections this machine has not closed on its side
/// (ESTABLISHED or CLOSE_WAIT), from /proc/net/tcp.
func tcpConnections() -> Set<UInt16> {
    guard let text = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return [] }
    var ports: Set<UInt16> = []
    for line in text.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ")
        guard fields.count > 3, ["01", "08"].contains(fields[3]),
              let remote = fields[2].split(separator: ":").last, let port = UInt16(remote, radix: 16) else { continue }
        ports.insert(port)
    }
    return ports
}

extension GpsdWatcherTests {
    /// A login user listening on gpsd's port while gpsd is down would have devaccessd serve
    /// its made-up position to every granted program: the watcher takes nothing from a
    /// socket a login user owns (asked of the kernel, sock_diag).
    @Test func aUsersFakeGpsdIsNotBelieved() throws {
        let user = try TestUser("fakegps")
        let port = try freeLoopbackPort()
        let fake = try fakeGpsd(as: user, port: port, devices: #"{"class":"DEVICE","path":"/dev/ttyACM0","activated":"2026-01-01T00:00:00.000Z"}"#,
                                then: #"{"class":"TPV","device":"/dev/ttyACM0","mode":3,"lat":1.5,"lon":2.5}"#)
        defer { withExtendedLifetime(fake) {} }
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: port))
        try watcher.start()
        defer { watcher.stop() }
        let state = try #require(waitUntil(watcher) { $0.problem?.contains("uid \(user.uid)") == true },
                                 "\(watcher.snapshot())")
        #expect(state.problem?.contains("not gpsd") == true && state.fixes.isEmpty && !state.connected, "\(state)")
        #expect(watcher.bestFix() == nil)
    }
}

extension GpsdWatcherTests {
    /// The same for `status`'s one-shot query: a login user's listener on gpsd's port could
    /// otherwise put a receiver path of its choosing (`$(...)`, a newline) into everyone's
    /// status, devices list and shell completions.
    @Test func aUsersFakeGpsdIsNotBelievedByStatus() throws {
        let user = try TestUser("fakegpq")
        let port = try freeLoopbackPort()
        let fake = try fakeGpsd(as: user, port: port, devices: #"{"class":"DEVICE","path":"$(id)","activated":"2026-01-01T00:00:00.000Z"}"#)
        defer { withExtendedLifetime(fake) {} }
        let client = GpsdClient(endpoint: GpsdEndpoint(host: "127.0.0.1", port: port))
        #expect(throws: GpsdError.untrusted(GpsdEndpoint(host: "127.0.0.1", port: port), uid: user.uid)) {
            try client.query()
        }
    }
}

/// A login user's listener on `port` that speaks like gpsd: the banner, then, after the
/// client's WATCH, a DEVICES report with `devices` and the line `then`. Listening on return.
func fakeGpsd(as user: TestUser, port: UInt16, devices: String, then: String = "") throws -> BackgroundProcess {
    let fake = try BackgroundProcess("/usr/bin/setpriv", [
        "--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--", "/usr/bin/python3", "-c", """
        import socket, sys
        s = socket.socket()
        s.bind(("127.0.0.1", int(sys.argv[1])))
        s.listen(8)
        while True:
            c, _ = s.accept()
            c.sendall(b'{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\\n')
            c.recv(4096)
            c.sendall(('{"class":"DEVICES","devices":[' + sys.argv[2] + ']}\\n' + sys.argv[3] + '\\n').encode())
        """, String(port), devices, then,
    ])
    let deadline = ContinuousClock.now + .seconds(10)
    while !isListening(port: port), ContinuousClock.now < deadline { usleep(20_000) }
    return fake
}

/// The test harness's gpsd must be the one the test talks to: a full run asks for hundreds
/// of ports, and once two tests were handed the same one (the kernel picks at random) a
/// test's daemon talked to another test's gpsd without devices and saw no fix for 40 s.
@Suite(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed (apt-get install gpsd gpsd-clients)"))
struct GpsdHarnessPortTests {
    /// Never twice, and never from the range the kernel hands out itself (bind to port 0,
    /// outgoing connections): a port from there was once some connection's local end by the
    /// time the test listened on it.
    @Test func noPortIsHandedOutTwiceNorFromTheKernelsOwnRange() throws {
        let ports = try (0..<500).map { _ in try freeLoopbackPort() }
        #expect(Set(ports).count == ports.count)
        let text = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let ephemeralLow = try #require(text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        #expect(ports.allSatisfy { Int($0) < ephemeralLow }, "\(ports.filter { Int($0) >= ephemeralLow })")
    }

    /// The harness's check that gpsfake's receiver reached gpsd (gpsfake adds it silently or
    /// not at all): a gpsd without devices does not pass it, a gpsfake does, and asking does
    /// not use up the log (the fix still comes to a watcher afterwards).
    @Test func aGpsdWithoutItsReceiverIsTold() throws {
        let bare = try GpsFakeProcess(gpsdWithoutDevices: ())
        defer { bare.stop() }
        #expect(!GpsFakeProcess.listsADevice(port: bare.port, within: .milliseconds(500)))
        let fake = try GpsFakeProcess(log: fixture("fix-3d.nmea"))
        defer { fake.stop() }
        #expect(GpsFakeProcess.listsADevice(port: fake.port, within: .seconds(5)))
        let watcher = GpsdWatcher(endpoint: GpsdEndpoint(host: "127.0.0.1", port: fake.port))
        try watcher.start()
        defer { watcher.stop() }
        #expect(watcher.waitForFix(timeout: .seconds(15)) != nil, "\(watcher.snapshot())")
    }

    /// A port another program already listens on is not mistaken for gpsd's.
    @Test func aPortSomeoneElseListensOnIsNotTakenForGpsd() throws {
        let squatter = try GpsdFakeServer(.send(Array(GpsdWatcherTests.banner.utf8), thenClose: false))
        defer { squatter.stop() }
        #expect {
            _ = try GpsFakeProcess(log: fixture("fix-3d.nmea"), port: squatter.port)
        } throws: { error in
            "\(error)".contains("another process listens there")
        }
    }
}
