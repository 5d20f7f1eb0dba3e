import Testing
import Foundation
import Glibc
import Synchronization
import DevAccessCore
import DevAccessHardware

/// The location adapter against a real gpsd (fed by gpsfake from the NMEA logs in
/// Fixtures/gps) and against loopback listeners that misbehave on purpose.
///
/// Serialized: the timing checks (refused "well under" the budget, hang "within budget
/// plus slack") should not compete with a gpsd being fed in a parallel test.
@Suite(.serialized)
struct LocationAdapterTests {
    static let budget: Duration = .milliseconds(500)
    /// Scheduling slack on a loaded 2-core CI machine; the point is "bounded", not "fast".
    static let slack: Duration = .milliseconds(400)

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
        #expect(elapsed < .milliseconds(100))
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
        #expect(reason.hasPrefix("gpsd at 127.0.0.1:\(server.port) did not answer within 500 ms"), "\(reason)")
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
        #expect(report.unavailableReason?.contains("did not answer within 500 ms") == true)
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
        #expect(report.unavailableReason?.contains("did not answer within 500 ms") == true,
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
        #expect(elapsed < .milliseconds(100))

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
        #expect(elapsed < .milliseconds(100))
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

// MARK: - Helpers

private func fixture(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/gps/\(name)").path
}

private func timed<T>(_ body: () throws -> T) rethrows -> (T, Duration) {
    let start = ContinuousClock.now
    let value = try body()
    return (value, ContinuousClock.now - start)
}

private struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Deterministic "random" bytes (SplitMix64), so a failure can be reproduced.
private func randomBytes(count: Int) -> [UInt8] {
    var state: UInt64 = 0x6770_7364_6761_7262
    return (0..<count).map { _ in
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return UInt8(truncatingIfNeeded: z ^ (z >> 31))
    }
}

/// A loopback port nobody listens on now: bind port 0, read the number, close.
private func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestSetupError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = loopback(port: 0)
    guard withSockaddr(&address, { bind(fd, $0, $1) }) == 0 else {
        throw TestSetupError("bind: \(String(cString: strerror(errno)))")
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    guard withUnsafeMutablePointer(to: &address, {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }) == 0 else { throw TestSetupError("getsockname: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: address.sin_port)
}

private func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

private func withSockaddr(_ address: inout sockaddr_in, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt {
    withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

/// True once something listens on 127.0.0.1:`port`, read from /proc/net/tcp (what
/// `ss -Hltn` shows) so that no test connection is made: gpsfake starts its feed on
/// the first connection, and a probe connection would use up the log.
private func isListening(port: UInt16) -> Bool {
    let hexPort = String(format: ":%04X", port)
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            // fields: sl local_address rem_address st ...; st 0A is LISTEN.
            if fields.count > 3, fields[1].hasSuffix(hexPort), fields[3] == "0A" { return true }
        }
    }
    return false
}

/// gpsd, fed through a pty by gpsfake from an NMEA log, on a free loopback port.
/// gpsfake and its gpsd run in their own process group, which `stop()` ends.
final class GpsFakeProcess: Sendable {
    static let isInstalled = executable("gpsfake") != nil && executable("gpsd") != nil
    static let skipMessage: Comment =
        "gpsfake is not installed: apt-get install gpsd gpsd-clients python3-gps to run the gpsd tests"

    let port: UInt16
    let processGroup: pid_t
    let logPath: String

    /// `gpsfake -1 -c 0.05 -P PORT -W 30 LOG`: one pass, 50 ms per sentence, exits 30 s
    /// after the log ends (we stop it long before).
    convenience init(log: String) throws {
        let port = try freeLoopbackPort()
        try self.init(port: port, arguments: ["gpsfake", "-1", "-c", "0.05", "-P", String(port), "-W", "30", log])
    }

    /// A bare gpsd with no device: `gpsd -N -S PORT`.
    convenience init(gpsdWithoutDevices: Void) throws {
        let port = try freeLoopbackPort()
        guard let gpsd = GpsFakeProcess.executable("gpsd") else { throw TestSetupError("gpsd not found") }
        try self.init(port: port, arguments: [gpsd, "-N", "-S", String(port),
                                              "-F", Self.bareControlSocket(port)])
    }

    private init(port: UInt16, arguments: [String]) throws {
        self.port = port
        logPath = NSTemporaryDirectory() + "devaccess-gpsfake-\(port).log"
        processGroup = try Self.spawnInOwnGroup(arguments, log: logPath)
        let deadline = ContinuousClock.now + .seconds(15)
        while !isListening(port: port) {
            var status: CInt = 0
            if waitpid(processGroup, &status, WNOHANG) == processGroup || ContinuousClock.now > deadline {
                let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                kill(-processGroup, SIGKILL)
                throw TestSetupError("\(arguments[0]) did not listen on port \(port); its output:\n\(log)")
            }
            usleep(20_000)
        }
    }

    func stop() {
        kill(-processGroup, SIGTERM)
        var status: CInt = 0
        let deadline = ContinuousClock.now + .seconds(5)
        while waitpid(processGroup, &status, WNOHANG) == 0 {
            if ContinuousClock.now > deadline {
                kill(-processGroup, SIGKILL)
                _ = waitpid(processGroup, &status, 0)
                break
            }
            usleep(10_000)
        }
        // gpsd is gpsfake's child, not ours; make sure it goes with the group.
        kill(-processGroup, SIGKILL)
        unlink(logPath)
        // gpsd drops root before it exits, so it cannot remove its control socket from /tmp.
        for socket in controlSockets { unlink(socket) }
    }

    /// gpsfake names gpsd's control socket after its own pid; the bare gpsd gets ours.
    private var controlSockets: [String] {
        ["/tmp/gpsfake-\(processGroup).sock", NSTemporaryDirectory() + "gpsfake-\(processGroup).sock",
         Self.bareControlSocket(port)]
    }

    static func bareControlSocket(_ port: UInt16) -> String {
        NSTemporaryDirectory() + "devaccess-gpsd-\(port).sock"
    }

    static func executable(_ name: String) -> String? {
        if name.hasPrefix("/") { return access(name, X_OK) == 0 ? name : nil }
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }

    /// posix_spawn with POSIX_SPAWN_SETPGROUP, output to `log`, default signal handling.
    private static func spawnInOwnGroup(_ arguments: [String], log: String) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes,
                                 Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        posix_spawnattr_setpgroup(&attributes, 0)
        // The test runner's threads may block or ignore signals; gpsfake must get SIGTERM.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var environment = ProcessInfo.processInfo.environment
        // gpsfake looks for gpsd on PATH; Debian puts it in /usr/sbin.
        environment["PATH"] = (environment["PATH"].map { $0 + ":" } ?? "") + "/usr/sbin:/usr/bin:/sbin:/bin"
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { args -> CInt in
            envp.withUnsafeBufferPointer { env -> CInt in
                guard let args = args.baseAddress, let env = env.baseAddress else { return EINVAL }
                return posix_spawnp(&pid, arguments[0], &actions, &attributes, args, env)
            }
        }
        guard rc == 0 else { throw TestSetupError("cannot start \(arguments[0]): \(String(cString: strerror(rc)))") }
        return pid
    }
}

/// A watching client that waits until gpsd reports a TPV with `mode` meeting `until`,
/// then stays connected so gpsd keeps the receiver open (and its last fix cached)
/// while the probe under test runs.
final class GpsdTestWatcher: Sendable {
    let fd: CInt
    let devicePath: String

    init(port: UInt16, until condition: (Int) -> Bool) throws {
        (fd, devicePath) = try Self.watch(port: port, until: condition)
    }

    private static func watch(port: UInt16, until condition: (Int) -> Bool) throws -> (CInt, String) {
        let fd = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket failed") }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        guard withSockaddr(&address, { Glibc.connect(fd, $0, $1) }) == 0 else {
            Glibc.close(fd)
            throw TestSetupError("watcher cannot connect to gpsd on port \(port)")
        }
        let watch = Array("?WATCH={\"enable\":true,\"json\":true};".utf8)
        _ = watch.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }

        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 8192)
        var seen: [String] = []
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { break }
            if count < 0 { continue }   // SO_RCVTIMEO: look at the clock again
            pending.append(contentsOf: chunk[..<count])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Data(pending[..<newline])
                pending.removeSubrange(...newline)
                guard let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any],
                      let kind = object["class"] as? String else { continue }
                seen.append(kind)
                if kind == "TPV", let mode = object["mode"] as? Int, condition(mode),
                   let device = object["device"] as? String {
                    return (fd, device)
                }
            }
        }
        Glibc.close(fd)
        throw TestSetupError("gpsd on port \(port) sent no matching TPV within 15 s; reports seen: \(seen)")
    }

    func close() { Glibc.close(fd) }
}

/// A loopback listener that misbehaves in one chosen way, on its own thread.
final class GpsdFakeServer: Sendable {
    enum Behavior: Sendable {
        /// Accept and never write.
        case silent
        /// Write these bytes, then close or hold the connection.
        case send([UInt8], thenClose: Bool)
        /// `prefix`, then `unit` again and again until the client hangs up.
        case endless(prefix: [UInt8], unit: [UInt8])

        /// "{" and then "a" forever, never a newline.
        static let endlessLine = Behavior.endless(prefix: Array("{".utf8),
                                                  unit: [UInt8](repeating: UInt8(ascii: "a"), count: 4096))
    }

    let port: UInt16
    private let listener: CInt
    private let stopped = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    init(_ behavior: Behavior) throws {
        port = try freeLoopbackPort()
        listener = socket(AF_INET, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var one: CInt = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size))
        var address = loopback(port: port)
        guard listener >= 0, withSockaddr(&address, { bind(listener, $0, $1) }) == 0, listen(listener, 8) == 0 else {
            if listener >= 0 { Glibc.close(listener) }
            throw TestSetupError("fake server cannot listen on port \(port): \(String(cString: strerror(errno)))")
        }
        let thread = Thread { [self] in serve(behavior) }
        thread.start()
    }

    private func serve(_ behavior: Behavior) {
        var held: [CInt] = []
        defer {
            held.forEach { _ = Glibc.close($0) }
            finished.store(true, ordering: .sequentiallyConsistent)
        }
        while !stopped.load(ordering: .sequentiallyConsistent) {
            var request = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&request, 1, 20) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            switch behavior {
            case .silent:
                held.append(client)
            case .send(let bytes, let thenClose):
                _ = bytes.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                if thenClose { Glibc.close(client) } else { held.append(client) }
            case .endless(let prefix, let unit):
                held.append(client)
                var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
                setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = prefix.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                var total = 0
                // Stops when the client hangs up (EPIPE/ECONNRESET) or after 64 MiB.
                while total < 64 << 20, !stopped.load(ordering: .sequentiallyConsistent) {
                    let sent = unit.withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                    if sent > 0 { total += sent } else if errno != EAGAIN && errno != EINTR { break }
                }
            }
        }
    }

    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        while !finished.load(ordering: .sequentiallyConsistent) { usleep(5_000) }
        Glibc.close(listener)
    }
}
