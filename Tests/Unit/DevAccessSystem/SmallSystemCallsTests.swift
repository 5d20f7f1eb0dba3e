import Glibc
import Dispatch
import Synchronization
import Testing
import DevAccessSystem
import DevAccessCore

@Suite struct SmallSystemCallsTests {
    @Test func writesFixedDecimalsAsPrintfDoes() {
        let cases: [(Double, Int, String)] = [
            (48.1234, 2, "48.12"), (0.125, 2, "0.12"), (-0.375, 2, "-0.38"), (9.995, 2, "9.99"), (9.9951, 2, "10.00"),
            (10000, 0, "10000"), (0.4, 0, "0"), (-0.4, 0, "-0"), (2.5, 0, "2"), (3.5, 0, "4"), (1.05, 1, "1.1"),
            (0.001, 3, "0.001"), (-11.5, 1, "-11.5"), (179.999_999_9, 6, "180.000000"),
        ]
        for (value, digits, text) in cases {
            #expect(DecimalText.fixed(value, digits: digits) == text, "\(value) with \(digits)")
        }
        #expect(DecimalText.fixed(.nan, digits: 1) == "nan")
        #expect(DecimalText.fixed(-.infinity, digits: 1) == "-inf")
        #expect(DecimalText.fixed(1e300, digits: 17).count == 319, "the longest there is still fits")
    }

    @Test func directoryOfAPath() {
        #expect(CanonicalPath.directory(of: "/run/devaccess/socket") == "/run/devaccess")
        #expect(CanonicalPath.directory(of: "/socket") == "/")
        #expect(CanonicalPath.directory(of: "socket") == "")
        #expect(CanonicalPath.directory(of: "/run/devaccess/") == "/run")
        #expect(CanonicalPath.directory(of: "a/b") == "a")
    }

    @Test func fileContentsKeepErrno() throws {
        #expect(throws: SystemCallError("open", path: "/nonexistent/devaccess", .noSuchFile)) {
            try FileDescriptor.contents(of: "/nonexistent/devaccess")
        }
        #expect(throws: SystemCallError("read", path: "/", Errno(rawValue: EISDIR))) { try FileDescriptor.contents(of: "/") }
        let text = try FileDescriptor.contents(of: "/proc/self/status")
        #expect(String(decoding: text, as: UTF8.self).hasPrefix("Name:"))
        #expect(try FileDescriptor.contents(of: "/dev/zero", limit: 100_000).count >= 100_000,
                "a file with no end stops at the limit")
    }

    @Test func detachedThreadRunsOnAThreadOfItsOwnWithItsName() async throws {
        let caller = pthread_self()
        let seen = await DetachedThread.run(name: "devaccess test thread") { () -> (String, Bool) in
            let name = (try? FileDescriptor.contents(of: "/proc/thread-self/comm")) ?? []
            return (String(decoding: name, as: UTF8.self).trimmingWhitespace(), pthread_equal(pthread_self(), caller) == 0)
        }
        #expect(seen.0 == "devaccess test", "15 bytes of the name are kept (the 15th a space)")
        #expect(seen.1)
        let done = DispatchSemaphore(value: 0)
        try DetachedThread.start(name: "devaccess start") { done.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
    }
}
