import Glibc
import Testing
import DevAccessSystem
import DevAccessTestSupport

/// `CharacterDevice`: the one "is this the character device we expect" check, on a
/// descriptor, a path (a symlink is no device unless followed) and a /proc fd link.
@Suite(.serialized, .enabled(if: isRoot, "needs root: makes device nodes"))
struct CharacterDeviceTests {
    @Test func aDescriptorTellsItsDeviceItsNodeAndItsOwner() throws {
        let directory = try TemporaryDirectory()
        let node = try directory.makeNode("full", major: 1, minor: 7)
        #expect(chown(node, 4242, 0) == 0)
        let descriptor = try FileDescriptor.open(node, O_RDONLY | O_CLOEXEC)
        let device = try #require(try CharacterDevice.of(descriptor.rawValue))
        #expect(device.isDevice(major: 1, minor: 7))
        #expect(!device.isDevice(major: 1, minor: 3) && !device.isDevice(major: 7, minor: 1))
        #expect(device.owner == 4242)
        #expect(device.description == "character device 1:7")
        var info = stat()
        #expect(stat(node, &info) == 0)
        #expect(device.node == FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
        #expect(device.number == UInt64(info.st_rdev))
        #expect(try CharacterDevice.at("/proc/self/fd/\(descriptor.rawValue)", following: true) == device,
                "the /proc link, followed, is the same node")
    }

    @Test func aFileASymlinkAndNothingAreNoDevice() throws {
        let directory = try TemporaryDirectory()
        let node = try directory.makeNode("zero", major: 1, minor: 5)
        let file = directory.path + "/file", link = directory.path + "/link"
        let created = FileDescriptor(owning: creat(file, 0o600))
        #expect(created.rawValue >= 0)
        #expect(try CharacterDevice.of(created.rawValue) == nil, "a regular file")
        #expect(symlink(node, link) == 0)
        #expect(try CharacterDevice.at(link) == nil, "a symlink is not followed")
        #expect(try CharacterDevice.at(link, following: true)?.isDevice(major: 1, minor: 5) == true)
        #expect(try CharacterDevice.at(directory.path) == nil, "a directory")
        #expect(throws: SystemCallError("lstat", path: directory.path + "/none", .noSuchFile)) {
            try CharacterDevice.at(directory.path + "/none")
        }
        #expect(throws: SystemCallError("fstat", .init(rawValue: EBADF))) { try CharacterDevice.of(-1) }
    }

    @Test func aProcFdLinkGivesItsNumbers() throws {
        let directory = try TemporaryDirectory()
        let descriptor = try FileDescriptor.open(try directory.makeNode("full", major: 1, minor: 7), O_RDONLY | O_CLOEXEC)
        let file = FileDescriptor(owning: creat(directory.path + "/file", 0o600))
        let fds = try FileDescriptor.open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let found = CharacterDevice.numbers(of: String(descriptor.rawValue), in: fds.rawValue)
        #expect(found?.major == 1 && found?.minor == 7)
        #expect(CharacterDevice.numbers(of: String(file.rawValue), in: fds.rawValue) == nil, "a regular file")
        #expect(CharacterDevice.numbers(of: "999999", in: fds.rawValue) == nil, "no such descriptor")
    }
}
