import Glibc
import Testing
@testable import DevAccessSystem
import DevAccessTestSupport

@Suite struct InotifyReaderTests {
    /// Real kernel records: a file made, its mode changed, then removed, in a watched directory.
    @Test func readsTheKernelsRecordsInOrder() throws {
        let directory = try TemporaryDirectory()
        let fd = inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK))
        try #require(fd >= 0)
        defer { close(fd) }
        let wd = inotify_add_watch(fd, directory.path, UInt32(IN_CREATE | IN_ATTRIB | IN_DELETE))
        try #require(wd >= 0)
        var reader = InotifyReader()
        #expect(reader.drain(fd).isEmpty, "nothing happened yet")
        let path = directory.path + "/camera-node-with-a-long-name-" + String(repeating: "x", count: 200)
        let file = open(path, O_CREAT | O_WRONLY, 0o600)
        try #require(file >= 0)
        close(file)
        #expect(chmod(path, 0o640) == 0)
        #expect(unlink(path) == 0)
        let records = reader.drain(fd)
        let name = String(path.split(separator: "/").last ?? "")
        #expect(records.map(\.watch) == [wd, wd, wd])
        #expect(records.map(\.name) == [name, name, name])
        #expect(records.map { $0.mask & UInt32(IN_CREATE | IN_ATTRIB | IN_DELETE) }
                == [UInt32(IN_CREATE), UInt32(IN_ATTRIB), UInt32(IN_DELETE)])
        #expect(reader.drain(fd).isEmpty, "the queue was read to its end")
    }

    /// More records than one read takes: the reader reads again until the queue is empty.
    @Test func aQueueLargerThanOneReadIsReadWhole() throws {
        let directory = try TemporaryDirectory()
        let fd = inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK))
        try #require(fd >= 0)
        defer { close(fd) }
        try #require(inotify_add_watch(fd, directory.path, UInt32(IN_ATTRIB)) >= 0)
        let path = directory.path + "/node"
        let file = open(path, O_CREAT | O_WRONLY, 0o600)
        try #require(file >= 0)
        close(file)
        for round in 0..<200 { #expect(chmod(path, round % 2 == 0 ? 0o640 : 0o600) == 0) }
        var reader = InotifyReader(capacity: 0)  // the smallest buffer: one record per read
        let records = reader.drain(fd)
        // The kernel merges an event identical to the one queued last; alternating modes
        // still give identical records, so at least one and every one an IN_ATTRIB on "node".
        #expect(!records.isEmpty)
        #expect(records.allSatisfy { $0.name == "node" && $0.mask & UInt32(IN_ATTRIB) != 0 })
    }

    /// The kernel's layout decoded from bytes: a name padded with NULs, an overflow record
    /// without a name, and a truncated header that is not read past.
    @Test func decodesTheLayout() {
        func record(_ wd: Int32, _ mask: UInt32, _ name: String, padded: Int) -> [UInt8] {
            var bytes: [UInt8] = []
            withUnsafeBytes(of: wd.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: mask.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: UInt32(0)) { bytes += $0 }
            withUnsafeBytes(of: UInt32(padded).littleEndian) { bytes += $0 }
            var name = Array(name.utf8)
            name += [UInt8](repeating: 0, count: padded - name.count)
            return bytes + name
        }
        let bytes = record(3, UInt32(IN_ATTRIB), "video0", padded: 16)
            + record(-1, UInt32(IN_Q_OVERFLOW), "", padded: 0) + [1, 2, 3]
        let records = InotifyReader.decode(bytes, count: bytes.count)
        #expect(records == [InotifyRecord(watch: 3, mask: UInt32(IN_ATTRIB), name: "video0"),
                            InotifyRecord(watch: -1, mask: UInt32(IN_Q_OVERFLOW), name: "")])
    }
}
