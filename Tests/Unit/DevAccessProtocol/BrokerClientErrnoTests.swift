import Glibc
import Testing
import DevAccessProtocol
import DevAccessSystem

/// The client keeps connect's errno: "no daemon" (ENOENT, ECONNREFUSED) and "not allowed"
/// (EACCES) are values a caller can tell apart, not words in a message.
@Suite struct BrokerClientErrnoTests {
    private static func scratchDirectory() throws -> String {
        var template = Array("/tmp/devaccess-client-XXXXXX".utf8CString)
        try #require(mkdtemp(&template) != nil)
        return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test func noSocketThereIsENOENTWithTheConnectCall() throws {
        let directory = try Self.scratchDirectory()
        defer { rmdir(directory) }
        let path = directory + "/none.sock"
        do {
            _ = try BrokerClient(socketPath: path, timeout: .seconds(2))
            Issue.record("connected to a socket that does not exist")
        } catch {
            guard case .unreachable = error else { Issue.record("expected .unreachable, got \(error)"); return }
            #expect(error.systemCall == SystemCallError("connect", path: path, .noSuchFile))
            // The path once: the message starts with it.
            #expect(error.description == "cannot reach devaccessd at \(path): connect: "
                    + "No such file or directory (ENOENT); no socket there: is devaccessd running?")
        }
    }

    @Test func aFileThatIsNoListeningSocketIsECONNREFUSED() throws {
        let directory = try Self.scratchDirectory()
        let path = directory + "/plain"
        defer { unlink(path); rmdir(directory) }
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        close(fd)
        do {
            _ = try BrokerClient(socketPath: path, timeout: .seconds(2))
            Issue.record("connected to a regular file")
        } catch {
            #expect(error.systemCall?.errno == .connectionRefused, "\(error)")
            #expect(error.systemCall?.isNotFound == false)
        }
    }
}
