import Testing
import Foundation
import Glibc
import Synchronization
import DevAccessCore
import DevAccessHardware
import DevAccessTestSupport

/// The location adapter against a real gpsd (fed by gpsfake from the NMEA logs in
/// Fixtures/gps) and against loopback listeners that misbehave on purpose.
///
/// Serialized: the timing checks (refused "well under" the budget, hang "within budget
/// plus slack") should not compete with a gpsd being fed in a parallel test.
@Suite(.serialized)
struct LocationAdapterTests {
    /// Long enough that a loaded 2-core CI machine's stalls stay well inside it: what these
    /// tests judge is "answered without waiting for the budget" and "cut off by the budget",
    /// not speed (that is the benchmark's figure).
    static let budget: Duration = .seconds(2)
    /// Scheduling slack on a loaded 2-core CI machine; the point is "bounded", not "fast".
    static let slack: Duration = .seconds(2)

    // MARK: Endpoint text

    @Test(arguments: [
        ("127.0.0.1:2947", "127.0.0.1", 2947),
        ("localhost", "localhost", 2947),
        ("gps-box.lan:4000", "gps-box.lan", 4000),
        ("[::1]:2948", "::1", 2948),
        ("[fe80::1%eth0]", "fe80::1%eth0", 2947),
        ("::1", "::1", 2947),
        ("  10.0.0.5:1 ", "10.0.0.5", 1),
    ] as [(String, String, Int)])
    func endpointParses(text: String, host: String, port: Int) throws {
        let endpoint = try GpsdEndpoint(parsing: text)
        #expect(endpoint.host == host)
        #expect(Int(endpoint.port) == port)
    }

    @Test(arguments: ["", "host:", "host:0", "host:65536", "host:http", "[::1", "[::1]x", "[nothost]:1",
                      "a b", "fe80::1:2947x", "-host", "host:12:13"])
    func endpointRejects(text: String) {
        #expect {
            _ = try GpsdEndpoint(parsing: text)
        } throws: { error in
            let message = String(describing: error)
            return message.contains("\"\(text)\"") && message.contains("HOST:PORT")
        }
    }

    @Test func endpointDescriptionBracketsIPv6() {
        #expect(GpsdEndpoint(host: "::1", port: 2947).description == "[::1]:2947")
        #expect(GpsdEndpoint.default.description == "127.0.0.1:2947")
    }

    @Test func endpointFromEnvironment() throws {
        #expect(try GpsdEndpoint.fromEnvironment([:]) == .default)
        #expect(try GpsdEndpoint.fromEnvironment(["DEVACCESS_GPSD": ""]) == .default)
        #expect(try GpsdEndpoint.fromEnvironment(["DEVACCESS_GPSD": "[::1]:3000"])
                == GpsdEndpoint(host: "::1", port: 3000))
        #expect {
            _ = try GpsdEndpoint.fromEnvironment(["DEVACCESS_GPSD": "gps:none"])
        } throws: { error in
            let message = String(describing: error)
            return message.contains("\"gps:none\"") && message.contains("DEVACCESS_GPSD")
        }
    }

    // MARK: Mapping gpsd's answer to devices (no I/O)

    @Test func receiversBecomeDevicesWithServiceRoute() throws {
        let endpoint = GpsdEndpoint(host: "127.0.0.1", port: 2999)
        let status = GpsdStatus(endpoint: endpoint, release: "3.22", protocolMajor: 3, protocolMinor: 14, receivers: [
            GpsdReceiver(path: "/dev/ttyACM0", driver: "u-blox", activated: "2024-06-15T12:00:00.000Z",
                         fix: GpsdFix(mode: .twoD, latitude: 1, longitude: 2)),
            GpsdReceiver(path: "tcp://10.0.0.9:5000"),
        ])
        let report = LocationAdapter.report(for: status) { path in .unusable("not looked at: \(path)") }
        #expect(report.permission == .location)
        #expect(report.unavailableReason == nil)
        try #require(report.devices.count == 2)
        let ublox = report.devices[0]
        #expect(ublox.id == "location:gpsd:/dev/ttyACM0")
        #expect(ublox.name == "u-blox")
        #expect(ublox.details == ["fix": "2d", "gpsdVersion": "3.22"])
        #expect(ublox.route == .service(ServiceAccess(name: "gpsd", endpoint: "127.0.0.1:2999",
                                                      openToAllLocalUsers: true)))
        #expect(ublox.nodes == [DeviceNode(path: "/dev/ttyACM0", role: "receiver", required: .read,
                                           state: .unusable("not looked at: /dev/ttyACM0"))])
        #expect(report.devices[1].name == "GPS receiver")
        #expect(report.devices[1].details["fix"] == "none")
        #expect(report.notes.map(\.message).contains("gpsd reports a 2D fix from /dev/ttyACM0"))
        #expect(report.notes.contains { $0.message.hasPrefix("no fix yet from tcp://10.0.0.9:5000") })
        // A network source has no node here; the real inspector says so instead of "vanished".
        guard case .unusable(let why) = LocationAdapter.inspectNode("tcp://10.0.0.9:5000") else {
            Issue.record("a network source must not be inspected as a file")
            return
        }
        #expect(why.contains("network source"))
    }

    // MARK: Real gpsd

    /// (1) gpsd with a receiver that has a 3D fix.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func reachableWithFix() throws {
        let gpsd = try GpsFakeProcess(log: fixture("fix-3d.nmea"))
        defer { gpsd.stop() }
        // gpsfake feeds the log only once a client watches; wait until gpsd has a fix,
        // and keep watching so gpsd keeps the receiver open while we probe.
        let watcher = try GpsdTestWatcher(port: gpsd.port, until: { $0 >= 2 })
        defer { watcher.close() }

        let endpoint = GpsdEndpoint(host: "127.0.0.1", port: gpsd.port)
        let (report, elapsed) = timed { LocationAdapter.probe(endpoint: endpoint, timeout: Self.budget) }
        print("[gpsd-timing] probe reachable with fix: \(elapsed)")

        #expect(report.unavailableReason == nil)
        let device = try #require(report.devices.first)
        #expect(report.devices.count == 1)
        #expect(device.id == "location:gpsd:\(watcher.devicePath)")
        #expect(device.name == "NMEA0183")
        #expect(["2d", "3d"].contains(device.details["fix"] ?? ""), "fix: \(device.details)")
        #expect(device.details["gpsdVersion"]?.isEmpty == false)
        #expect(device.route == .service(ServiceAccess(name: "gpsd", endpoint: "127.0.0.1:\(gpsd.port)",
                                                       openToAllLocalUsers: true)))
        let node = try #require(device.nodes.first)
        #expect(node.role == "receiver" && node.required == .read)
        #expect(node.facts?.kind == .characterDevice, "node state: \(node.state)")
        // 2D or 3D depends on where in the NMEA cycle gpsd's cached fix was taken.
        #expect(report.notes.contains { $0.message.hasPrefix("gpsd reports a 3D fix")
            || $0.message.hasPrefix("gpsd reports a 2D fix") }, "\(report.notes)")
        #expect(elapsed < Self.budget)

        // Coordinates, when gpsd's cached TPV has them, are the fixture's (48°07.038' N, 11°31.000' E).
        let status = try GpsdClient(endpoint: endpoint, timeout: Self.budget).query()
        #expect(!status.release.isEmpty && status.protocolMajor == 3)
        let receiver = try #require(status.receivers.first)
        #expect(receiver.isActive && receiver.fix.mode.hasFix)
        if let latitude = receiver.fix.latitude, let longitude = receiver.fix.longitude {
            #expect(abs(latitude - 48.1173) < 1e-4 && abs(longitude - 11.516666) < 1e-4)
        }
    }

    /// (2) gpsd with a receiver that talks but has no fix.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func reachableWithoutFix() throws {
        let gpsd = try GpsFakeProcess(log: fixture("no-fix.nmea"))
        defer { gpsd.stop() }
        let watcher = try GpsdTestWatcher(port: gpsd.port, until: { $0 >= 1 })
        defer { watcher.close() }

        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: gpsd.port), timeout: Self.budget)
        }
        print("[gpsd-timing] probe reachable without fix: \(elapsed)")
        #expect(report.unavailableReason == nil)
        let device = try #require(report.devices.first)
        #expect(device.details["fix"] == "none")
        #expect(report.notes.contains { $0.message.hasPrefix("no fix yet") }, "\(report.notes)")
        #expect(elapsed < Self.budget)
    }

    /// gpsd running with no receiver at all.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, GpsFakeProcess.skipMessage))
    func reachableWithoutReceiver() throws {
        let gpsd = try GpsFakeProcess(gpsdWithoutDevices: ())
        defer { gpsd.stop() }
        let report = LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: gpsd.port),
                                           timeout: Self.budget)
        #expect(report.devices.isEmpty)
        #expect(report.unavailableReason == "gpsd at 127.0.0.1:\(gpsd.port) is running but reports no GPS receiver")
    }

    // MARK: Nothing there, or something that is not gpsd

    /// (3) Nothing listens: refused at once, far inside the budget.
    @Test func unreachableRefusedQuickly() throws {
        let port = try freeLoopbackPort()
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: port), timeout: Self.budget)
        }
        print("[gpsd-timing] probe unreachable (refused): \(elapsed)")
        #expect(report.devices.isEmpty)
        let reason = try #require(report.unavailableReason)
        #expect(reason.contains("connection refused") && reason.contains("127.0.0.1:\(port)"), "\(reason)")
        #expect(elapsed < Self.budget / 2, "took \(elapsed): it waited for the budget")
    }

    /// A documentation-only address (RFC 5737): no route, a rejection or silence,
    /// depending on the machine; in every case an answer within the budget.
    @Test func unroutableHostIsBounded() throws {
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "192.0.2.1", port: 2947), timeout: Self.budget)
        }
        print("[gpsd-timing] probe unroutable host: \(elapsed)")
        #expect(report.devices.isEmpty)
        #expect(report.unavailableReason?.contains("192.0.2.1:2947") == true, "\(String(describing: report.unavailableReason))")
        #expect(elapsed < Self.budget + Self.slack)
    }

    /// Host names go through getaddrinfo on a worker thread, still within the budget.
    /// The name that resolves gets a generous budget: what is checked is that resolution
    /// works through the worker, not how fast a loaded machine runs it (the bounded wait
    /// is checked with the name that never resolves, below).
    @Test func hostNamesResolveWithinBudget() throws {
        let port = try freeLoopbackPort()
        let local = LocationAdapter.probe(endpoint: GpsdEndpoint(host: "localhost", port: port), timeout: .seconds(10))
        #expect(local.unavailableReason?.contains("connection refused") == true,
                "\(String(describing: local.unavailableReason))")

        // .invalid never resolves (RFC 6761); without DNS the lookup may instead run out of time.
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "gpsd.devaccess.invalid", port: 2947),
                                  timeout: Self.budget)
        }
        let reason = try #require(report.unavailableReason)
        #expect(reason.contains("does not resolve") || reason.contains("did not resolve"), "\(reason)")
        #expect(elapsed < Self.budget + Self.slack)
    }

    /// (4) Accepts and never writes: unavailable once the budget is spent, not later.
    @Test func hangingListenerTimesOut() throws {
        let server = try GpsdFakeServer(.silent)
        defer { server.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port), timeout: Self.budget)
        }
        print("[gpsd-timing] probe hang: \(elapsed)")
        let reason = try #require(report.unavailableReason)
        #expect(reason.hasPrefix("gpsd at 127.0.0.1:\(server.port) did not answer within 2000 ms"), "\(reason)")
        #expect(elapsed >= Self.budget - .milliseconds(20))
        #expect(elapsed < Self.budget + Self.slack)
    }

    /// (5) Garbage of several kinds: each says "garbage" and comes back at once.
    @Test(arguments: [
        ("random bytes", GpsdFakeServer.Behavior.send(randomBytes(count: 2048), thenClose: false)),
        ("non-gpsd JSON", .send(Array("{\"hello\":\"world\"}\n".utf8), thenClose: false)),
        ("JSON array", .send(Array("[1,2,3]\n".utf8), thenClose: false)),
        ("broken JSON", .send(Array("{\"class\":\"VERSION\",\n".utf8), thenClose: false)),
        ("TPV before VERSION", .send(Array("{\"class\":\"TPV\",\"mode\":3}\n".utf8), thenClose: false)),
        ("VERSION without release", .send(Array("{\"class\":\"VERSION\",\"proto_major\":3}\n".utf8),
                                          thenClose: false)),
        ("HTTP server", .send(Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".utf8),
                              thenClose: true)),
        ("endless line", .endlessLine),
    ] as [(String, GpsdFakeServer.Behavior)])
    func garbageIsRefused(kind: String, behavior: GpsdFakeServer.Behavior) throws {
        let server = try GpsdFakeServer(behavior)
        defer { server.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port), timeout: Self.budget)
        }
        let reason = try #require(report.unavailableReason, "\(kind)")
        #expect(reason.contains("garbage"), "\(kind): \(reason)")
        #expect(report.devices.isEmpty)
        #expect(elapsed < Self.budget, "\(kind) took \(elapsed)")
    }

    /// A banner and then nothing but a closed connection.
    @Test func closedAfterBanner() throws {
        let server = try GpsdFakeServer(.send(Array(Self.banner.utf8), thenClose: true))
        defer { server.stop() }
        let report = LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                           timeout: Self.budget)
        #expect(report.unavailableReason?.contains("closed the connection before sending its device list") == true,
                "\(String(describing: report.unavailableReason))")
    }

    /// A banner, then silence: the budget runs out waiting for DEVICES.
    @Test func silentAfterBanner() throws {
        let server = try GpsdFakeServer(.send(Array(Self.banner.utf8), thenClose: false))
        defer { server.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port), timeout: Self.budget)
        }
        #expect(report.unavailableReason?.contains("did not answer within 2000 ms") == true)
        #expect(report.unavailableReason?.contains("DEVICES") == true)
        #expect(elapsed < Self.budget + Self.slack)
    }

    /// gpsd's ERROR report is passed on in the reason.
    @Test func gpsdErrorIsReported() throws {
        let server = try GpsdFakeServer(.send(Array((Self.banner
            + "{\"class\":\"ERROR\",\"message\":\"Unrecognized request '?WATCH'\"}\n").utf8), thenClose: false))
        defer { server.stop() }
        let report = LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                           timeout: Self.budget)
        #expect(report.unavailableReason?.contains("Unrecognized request") == true)
    }

    /// A peer that floods well-formed reports but never the device list is cut off at the deadline.
    @Test func floodOfIrrelevantReportsIsBounded() throws {
        let unit = Array(String(repeating: "{\"class\":\"SKY\",\"satellites\":[]}\n", count: 100).utf8)
        let server = try GpsdFakeServer(.endless(prefix: Array(Self.banner.utf8), unit: unit))
        defer { server.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port), timeout: Self.budget)
        }
        #expect(report.unavailableReason?.contains("did not answer within 2000 ms") == true,
                "\(String(describing: report.unavailableReason))")
        #expect(elapsed < Self.budget + Self.slack, "took \(elapsed)")
    }

    /// Receiver nodes: only paths inside /dev are examined (the path comes from whoever
    /// answers on gpsd's port); a symlink is reported by its target; a non-device is refused.
    @Test(.enabled(if: getuid() == 0, "needs root: makes entries in /dev"))
    func receiverNodeInspection() throws {
        let tag = "devaccess-gps-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let link = "/dev/\(tag)-gps0", file = "/dev/\(tag)-plain", escape = "/dev/\(tag)-escape"
        let outside = FileManager.default.temporaryDirectory.appendingPathComponent(tag).path
        defer { for path in [link, file, escape, outside] { try? FileManager.default.removeItem(atPath: path) } }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "/dev/null")
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        #expect(FileManager.default.createFile(atPath: outside, contents: Data()))
        try FileManager.default.createSymbolicLink(atPath: escape, withDestinationPath: outside)

        guard case .present(let facts) = LocationAdapter.inspectNode(link) else {
            Issue.record("a symlink to a character device must be present: \(LocationAdapter.inspectNode(link))")
            return
        }
        #expect(facts.path == "/dev/null" && facts.kind == .characterDevice)
        guard case .unusable(let why) = LocationAdapter.inspectNode(file) else {
            Issue.record("a regular file is not a receiver")
            return
        }
        #expect(why.contains("not a character device"))
        guard case .unusable(let gone) = LocationAdapter.inspectNode("/dev/\(tag)-missing") else {
            Issue.record("a missing node must be unusable")
            return
        }
        #expect(gone.contains("no longer exists"))
        #expect(LocationAdapter.inspectNode(outside) == .unusable("\(outside) is not under /dev; devaccess does not examine it"))
        guard case .unusable(let escaped) = LocationAdapter.inspectNode(escape) else {
            Issue.record("a /dev symlink leading outside /dev must not be examined")
            return
        }
        #expect(escaped.contains("leads outside /dev"))
    }

    // MARK: Scripted gpsd (exact reports, no timing from a real receiver)

    static let devices = "{\"class\":\"DEVICES\",\"devices\":[{\"class\":\"DEVICE\",\"path\":\"/dev/ttyACM7\","
        + "\"driver\":\"u-blox\",\"activated\":\"2024-06-15T12:00:00.000Z\"}]}\n"

    /// The whole exchange, answered before it is asked: the client reads in order.
    @Test func scriptedFixGivesCoordinates() throws {
        let script = Self.banner + Self.devices
            + "{\"class\":\"WATCH\",\"enable\":true,\"json\":true}\n"
            + "{\"class\":\"SKY\",\"device\":\"/dev/ttyACM7\",\"satellites\":[]}\n"
            + "{\"class\":\"POLL\",\"time\":\"2024-06-15T12:00:01.000Z\",\"active\":1,\"tpv\":[{\"class\":\"TPV\","
            + "\"device\":\"/dev/ttyACM7\",\"mode\":3,\"lat\":48.1173,\"lon\":11.516666667}],\"sky\":[]}\n"
        let server = try GpsdFakeServer(.send(Array(script.utf8), thenClose: false))
        defer { server.stop() }
        let endpoint = GpsdEndpoint(host: "127.0.0.1", port: server.port)
        let (status, elapsed) = try timed { try GpsdClient(endpoint: endpoint, timeout: Self.budget).query() }
        #expect(status.release == "3.22" && status.protocolMinor == 14)
        #expect(status.receivers == [GpsdReceiver(path: "/dev/ttyACM7", driver: "u-blox",
                                                  activated: "2024-06-15T12:00:00.000Z",
                                                  fix: GpsdFix(mode: .threeD, latitude: 48.1173,
                                                               longitude: 11.516666667))])
        #expect(elapsed < Self.budget / 2, "took \(elapsed): it waited for the budget")

        let report = LocationAdapter.probe(endpoint: endpoint, timeout: Self.budget)
        let device = try #require(report.devices.first)
        #expect(device.details == ["fix": "3d", "gpsdVersion": "3.22"])
        // The receiver path does not exist here; the node is reported, not the device dropped.
        #expect(device.nodes.first?.facts == nil)
        #expect(report.notes.map(\.message).contains("gpsd reports a 3D fix from /dev/ttyACM7"))
    }

    /// A receiver gpsd has open but that has said nothing: the device list is the
    /// answer; the fix stays unknown once the budget is spent (no error).
    @Test func silentReceiverLeavesFixUnreported() throws {
        let server = try GpsdFakeServer(.send(Array((Self.banner + Self.devices).utf8), thenClose: false))
        defer { server.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port), timeout: Self.budget)
        }
        #expect(report.unavailableReason == nil)
        #expect(report.devices.first?.details["fix"] == "none")
        #expect(report.notes.contains { $0.message.contains("gpsd has no data from it yet") }, "\(report.notes)")
        #expect(elapsed < Self.budget + Self.slack)
    }

    /// A TPV without "device" belongs to the only receiver; an inactive receiver is not waited for.
    @Test func tpvWithoutDeviceAndInactiveReceiver() throws {
        let single = Self.banner + Self.devices + "{\"class\":\"TPV\",\"mode\":2,\"lat\":1.5,\"lon\":2.5}\n"
        let server = try GpsdFakeServer(.send(Array(single.utf8), thenClose: false))
        defer { server.stop() }
        let status = try GpsdClient(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                    timeout: Self.budget).query()
        #expect(status.receivers.first?.fix == GpsdFix(mode: .twoD, latitude: 1.5, longitude: 2.5))

        let inactive = Self.banner
            + "{\"class\":\"DEVICES\",\"devices\":[{\"class\":\"DEVICE\",\"path\":\"/dev/ttyUSB3\",\"activated\":0}]}\n"
        let closedServer = try GpsdFakeServer(.send(Array(inactive.utf8), thenClose: false))
        defer { closedServer.stop() }
        let (report, elapsed) = timed {
            LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: closedServer.port),
                                  timeout: Self.budget)
        }
        #expect(report.devices.map(\.id) == ["location:gpsd:/dev/ttyUSB3"])
        #expect(report.notes.contains { $0.message.contains("gpsd does not have it open") }, "\(report.notes)")
        #expect(elapsed < Self.budget / 2, "took \(elapsed): it waited for the budget")
    }

    /// A TPV whose mode is not 0-3 is not gpsd's protocol.
    @Test func invalidModeIsGarbage() throws {
        let script = Self.banner + Self.devices + "{\"class\":\"TPV\",\"device\":\"/dev/ttyACM7\",\"mode\":\"3\"}\n"
        let server = try GpsdFakeServer(.send(Array(script.utf8), thenClose: false))
        defer { server.stop() }
        let report = LocationAdapter.probe(endpoint: GpsdEndpoint(host: "127.0.0.1", port: server.port),
                                           timeout: Self.budget)
        #expect(report.unavailableReason?.contains("garbage") == true)
        #expect(report.unavailableReason?.contains("\"mode\" has the wrong type") == true,
                "\(String(describing: report.unavailableReason))")
    }

    static let banner = "{\"class\":\"VERSION\",\"release\":\"3.22\",\"rev\":\"3.22\",\"proto_major\":3,\"proto_minor\":14}\n"
}
