import Glibc
import Testing
import DevAccessSystem

/// `FileDescriptor` as the owner of a descriptor: closed when it goes, at once with `close`,
/// never with `release`, handed to a directory stream by `directoryStream`.
@Suite struct FileDescriptorOwnershipTests {
    /// The file a descriptor number names now, by device and inode; nil: the number is closed.
    /// Tests run in parallel in one process, so a closed number can be taken again at once by
    /// another test: "closed" is checked as "no longer this test's own file", a file of a
    /// unique inode that no other test opens.
    private func file(_ fd: CInt) -> [UInt64]? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return [UInt64(info.st_dev), UInt64(info.st_ino)]
    }

    /// A new file of its own inode, opened read-only; removed from its directory at once.
    private func ownFile() throws -> FileDescriptor {
        var template = Array("/tmp/devaccess-fd-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        guard fd >= 0 else { throw SystemCallError.current("mkstemp") }
        Glibc.close(fd)
        let path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { unlink(path) }
        return try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
    }

    /// A new directory of its own inode (the caller removes it: a removed directory lists nothing).
    private func ownDirectory() throws -> String {
        var template = Array("/tmp/devaccess-fd-XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { throw SystemCallError.current("mkdtemp") }
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test func theOwnerClosesItReleaseHandsItOn() throws {
        var (raw, identity) = try { () throws -> (CInt, [UInt64]?) in
            let owner = try ownFile()
            return (owner.rawValue, file(owner.rawValue))
        }()
        #expect(identity != nil)
        #expect(file(raw) != identity, "closed when the owner went")
        let owned = try ownFile()
        (raw, identity) = (owned.rawValue, file(owned.rawValue))
        owned.close()
        #expect(file(raw) != identity, "closed by close()")
        let kept = try ownFile()
        identity = file(kept.rawValue)
        let released = kept.release()
        defer { Glibc.close(released) }
        #expect(file(released) == identity, "release hands it over open")
    }

    @Test func aDuplicateIsItsOwnCloseOnExecDescriptor() throws {
        let original = try ownFile()
        let copy = try FileDescriptor.duplicate(original.rawValue)
        #expect(copy.rawValue != original.rawValue)
        #expect(fcntl(copy.rawValue, F_GETFD) & FD_CLOEXEC != 0)
        #expect(throws: SystemCallError("fcntl", .init(rawValue: EBADF))) { _ = try FileDescriptor.duplicate(-1) }
    }

    @Test func aDirectoryStreamTakesTheDescriptorOver() throws {
        let path = try ownDirectory()
        defer { rmdir(path) }
        let directory = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let raw = directory.rawValue
        let identity = file(raw)
        let stream = try directory.directoryStream()
        #expect(identity != nil && file(raw) == identity, "the stream has it now")
        #expect(readdir(stream) != nil)
        closedir(stream)
        #expect(file(raw) != identity)

        let plain = try ownFile()
        let plainRaw = plain.rawValue
        let plainIdentity = file(plainRaw)
        do {
            let stream = try plain.directoryStream()
            closedir(stream)
            Issue.record("a plain file became a directory stream")
        } catch {
            #expect(error == SystemCallError("fdopendir", .init(rawValue: ENOTDIR)))
        }
        #expect(file(plainRaw) != plainIdentity, "closed when no stream could take it")
    }
}
