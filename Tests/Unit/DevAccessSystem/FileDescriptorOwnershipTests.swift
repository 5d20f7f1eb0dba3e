import Glibc
import Testing
import DevAccessSystem

/// `FileDescriptor` as the owner of a descriptor: closed when it goes, at once with `close`,
/// never with `release`, handed to a directory stream by `directoryStream`.
@Suite struct FileDescriptorOwnershipTests {
    private func isOpen(_ fd: CInt) -> Bool { fcntl(fd, F_GETFD) >= 0 }

    private func devNull() throws -> FileDescriptor { try FileDescriptor.open("/dev/null", O_RDONLY | O_CLOEXEC) }

    @Test func theOwnerClosesItReleaseHandsItOn() throws {
        var raw = try devNull().rawValue
        #expect(!isOpen(raw), "closed when the owner went")
        let owned = try devNull()
        raw = owned.rawValue
        owned.close()
        #expect(!isOpen(raw), "closed by close()")
        let released = try devNull().release()
        defer { Glibc.close(released) }
        #expect(isOpen(released), "release hands it over open")
    }

    @Test func aDuplicateIsItsOwnCloseOnExecDescriptor() throws {
        let original = try devNull()
        let copy = try FileDescriptor.duplicate(original.rawValue)
        #expect(copy.rawValue != original.rawValue)
        #expect(fcntl(copy.rawValue, F_GETFD) & FD_CLOEXEC != 0)
        #expect(throws: SystemCallError("fcntl", .init(rawValue: EBADF))) { _ = try FileDescriptor.duplicate(-1) }
    }

    @Test func aDirectoryStreamTakesTheDescriptorOver() throws {
        let directory = try FileDescriptor.open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let raw = directory.rawValue
        let stream = try directory.directoryStream()
        #expect(isOpen(raw), "the stream has it now")
        #expect(readdir(stream) != nil)
        closedir(stream)
        #expect(!isOpen(raw))

        let file = try devNull()
        let fileRaw = file.rawValue
        do {
            let stream = try file.directoryStream()
            closedir(stream)
            Issue.record("/dev/null became a directory stream")
        } catch {
            #expect(error == SystemCallError("fdopendir", .init(rawValue: ENOTDIR)))
        }
        #expect(!isOpen(fileRaw), "closed when no stream could take it")
    }
}
