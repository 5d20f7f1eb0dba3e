import Testing
import Foundation
import Glibc
import Synchronization
import DevAccessTestSupport

// The gpsd harness shared by the location suites: gpsd fed by gpsfake, a client that waits
// for gpsd's fix, loopback servers that misbehave on purpose, and small socket helpers.

func fixture(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/gps/\(name)").path
}

func timed<T>(_ body: () throws -> T) rethrows -> (T, Duration) {
    let start = ContinuousClock.now
    let value = try body()
    return (value, ContinuousClock.now - start)
}

struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Deterministic "random" bytes (SplitMix64), so a failure can be reproduced.
func randomBytes(count: Int) -> [UInt8] {
    var state: UInt64 = 0x6770_7364_6761_7262
    return (0..<count).map { _ in
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return UInt8(truncatingIfNeeded: z ^ (z >> 31))
    }
}

extension GpsFakeProcess {
    static let skipMessage: Comment =
        "gpsfake is not installed: apt-get install gpsd gpsd-clients python3-gps to run the gpsd tests"
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
    /// Connections accepted so far: how often a client came (back).
    var accepted: Int { acceptedCount.load(ordering: .sequentiallyConsistent) }
    private let acceptedCount = Atomic<Int>(0)
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

    func serve(_ behavior: Behavior) {
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
            acceptedCount.add(1, ordering: .sequentiallyConsistent)
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
