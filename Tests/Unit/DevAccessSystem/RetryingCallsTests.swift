import Glibc
import Synchronization
import Testing
import DevAccessSystem
import DevAccessTestSupport

/// The wrappers that take EINTR (and EAGAIN where waiting is right) off their callers:
/// `FileDescriptor.writeAll(until:)`, `ThreadSleep`, `NonBlockingConnect`.
@Suite(.serialized) struct RetryingCallsTests {
    @Test func aSleepGoesOnAfterASignal() throws {
        let started = ContinuousClock.now
        let interrupted = SignalInterruptions.interrupting { ThreadSleep.sleep(for: .milliseconds(300)) }
        #expect(interrupted.handlerInstalled)
        #expect(interrupted.sent == 5, "the signals came while it slept")
        #expect(ContinuousClock.now - started >= .milliseconds(300), "interrupted, the sleep went on for the time left")
    }

    /// A non-blocking pipe that is full: the write waits for room until its deadline, then
    /// says it did not get everything out; with a reader that drains it, everything arrives.
    @Test func aFullNonBlockingDescriptorIsWaitedForUntilTheDeadline() throws {
        var ends: [CInt] = [0, 0]
        #expect(pipe(&ends) == 0)
        let reader = FileDescriptor(owning: ends[0]), writer = FileDescriptor(owning: ends[1])
        #expect(fcntl(writer.rawValue, F_SETFL, O_NONBLOCK) == 0)
        let filler = String(repeating: "x", count: 4096)
        var filled = 0
        while write(writer.rawValue, filler, filler.utf8.count) > 0 { filled += 1 }
        #expect(errno == EAGAIN && filled > 0, "the pipe is full")
        let started = ContinuousClock.now
        #expect(!FileDescriptor.writeAll(writer.rawValue, "y", until: started + .milliseconds(100)), "no room in time")
        #expect(ContinuousClock.now - started >= .milliseconds(100), "it waited for room until the deadline")

        // A reader that drains the pipe slowly, 4 KiB every 5 ms, until all that was written arrived.
        let readerFD = reader.rawValue, expected = 2 * filled * 4096 + 3
        let received = Atomic<Int>(0)
        try DetachedThread.start {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while received.load(ordering: .sequentiallyConsistent) < expected {
                usleep(5_000)
                let count = read(readerFD, &buffer, buffer.count)
                if count > 0 { received.add(count, ordering: .sequentiallyConsistent) }
            }
        }
        #expect(FileDescriptor.writeAll(writer.rawValue, String(repeating: filler, count: filled) + "end",
                                        until: .now + .seconds(5)), "room made by the reader is used")
        // The reader thread uses its descriptor until it has everything.
        let waitEnd = ContinuousClock.now + .seconds(5)
        while received.load(ordering: .sequentiallyConsistent) < expected && ContinuousClock.now < waitEnd {
            usleep(5_000)
        }
        #expect(received.load(ordering: .sequentiallyConsistent) == expected, "every byte arrived, once")
    }

    @Test func aWriteToAPipeWithoutReaderFails() {
        var ends: [CInt] = [0, 0]
        #expect(pipe(&ends) == 0)
        let writer = FileDescriptor(owning: ends[1])
        close(ends[0])
        let previous = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previous) }
        #expect(!FileDescriptor.writeAll(writer.rawValue, "x"), "EPIPE is no reason to try again")
    }

    private func unixSocket() -> FileDescriptor {
        FileDescriptor(owning: socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0))
    }

    private func address(_ path: String) -> [UInt8] {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    @Test func aNonBlockingConnectStartsOrSaysWhy() throws {
        let path = "/tmp/devaccess-connect-test-\(getpid())"
        unlink(path)
        defer { unlink(path) }
        let listener = unixSocket()
        let bound = address(path).withUnsafeBytes { bind(listener.rawValue, $0.baseAddress?.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count)) }
        #expect(bound == 0)
        #expect(listen(listener.rawValue, 4) == 0)

        let client = unixSocket()
        let started = try address(path).withUnsafeBytes { raw in
            try Result { () throws(SystemCallError) in try NonBlockingConnect.start(client.rawValue, to: raw) }.get()
        }
        if started == .inProgress {
            #expect(try Poll.wait(for: .writable(client.rawValue), until: .now + .seconds(2)))
        }
        try NonBlockingConnect.outcome(client.rawValue)

        let missing = unixSocket()
        let failure = address(path + "-missing").withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try NonBlockingConnect.start(missing.rawValue, to: raw) }
        }
        guard case .failure(let error) = failure else {
            Issue.record("a connect to no socket succeeded: \(failure)")
            return
        }
        #expect(error.function == "connect" && error.errno == .noSuchFile, "\(error)")
    }
}
