import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport

/// Hostile review round 3, finding 8 (issue 27): with gpsd slow to answer, `devaccess request
/// location` said "unavailable: gpsd ... did not answer within 500 ms" and recorded nothing,
/// while `devaccess location` in the same second served a fix from devaccessd's own watch
/// connection. While devaccessd runs, status, request and location answer from its one
/// watcher: no second connection to gpsd.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd and a gpsd stand-in as root"))
struct LocationOneAnswerTests {
    /// A gpsd stand-in (root's, as gpsd is): the first connection is answered at once and
    /// streams a 3D fix; every later one is answered after `delay` seconds (gpsd under load).
    /// It writes how many connections sent `?WATCH` to `count`.
    static let slowGpsd = """
        import json, socket, sys, threading, time
        port, count, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen(16)
        lock = threading.Lock()
        watches = [0]
        def serve(c, first):
            try:
                if not first:
                    time.sleep(delay)
                c.sendall(b'{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\\n')
                if b"WATCH" not in c.recv(4096):
                    return
                with lock:
                    watches[0] += 1
                    open(count, "w").write(str(watches[0]))
                c.sendall(b'{"class":"DEVICES","devices":[{"class":"DEVICE","path":"/dev/ttyACM0",'
                          b'"driver":"u-blox","activated":"2026-11-30T21:00:00.000Z"}]}\\n')
                c.sendall(b'{"class":"WATCH","enable":true,"json":true}\\n')
                while True:
                    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
                    c.sendall(json.dumps({"class": "TPV", "device": "/dev/ttyACM0", "mode": 3, "time": now,
                                          "lat": 48.858093, "lon": 2.294694, "altMSL": 35.0}).encode() + b"\\n")
                    time.sleep(0.2)
            except OSError:
                pass
        first = True
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c, first), daemon=True).start()
            first = False
        """

    @Test func requestStatusAndLocationAnswerFromTheOneWatcher() throws {
        let port = try freeLoopbackPort()
        let scratch = try TemporaryDirectory()
        let count = scratch.path + "/watches"
        let gpsd = try BackgroundProcess("/usr/bin/python3", ["-c", Self.slowGpsd, String(port), count, "1.5"])
        defer { withExtendedLifetime(gpsd) {} }
        #expect(LiveEnforcementTests.waitFor(10) { isListening(port: port) } != nil, "the stand-in never listened")
        let daemon = try RunningDaemon(arguments: ["--gpsd", "127.0.0.1:\(port)", "--gpsd-timeout", "500"])
        let user = try TestUser("loneans")
        let socket = ["--socket", daemon.socketPath]
        #expect(try TestProcess.devaccess(["grant", "location", "--user", user.name] + socket).status == 0)

        // devaccessd's watch connection (the first) serves the fix.
        let served = try user.devaccess(["location", "--json", "--wait", "5s"] + socket)
        #expect(served.status == 0, "\(served.stderr)")
        let fix = served.status == 0 ? try json(served.stdout) : [:]
        #expect(fix["latitude"] != nil, "\(served.stdout)")

        // In the same seconds the request and the status say what the watcher knows.
        let requested = try user.devaccess(["request", "location", "--json"] + socket)
        let results = (try? json(requested.stdout))?["results"] as? [[String: Any]] ?? []
        #expect(results.first?["outcome"] as? String == "already-allowed",
                "request location disagrees with location: \(requested.stdout) \(requested.stderr)")
        let status = try user.devaccess(["status", "location", "--json", "--broker"] + socket)
        #expect(!status.stdout.contains("did not answer"), "status probed gpsd itself: \(status.stdout)")
        #expect(status.stdout.contains("/dev/ttyACM0"), "status does not list the watcher's receiver: \(status.stdout) \(status.stderr)")
        let watches = (try? String(contentsOfFile: count, encoding: .utf8)) ?? ""
        #expect(watches == "1", "devaccessd opened \(watches) watching connections to gpsd, not one: \(daemon.log)")
        #expect(daemon.stop() == 0)
    }
}
