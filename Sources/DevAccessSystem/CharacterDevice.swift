import Glibc
import CLinux

/// The one answer to "is this the character device we expect": what a descriptor or a
/// path refers to, when it is a character device. Checked on a descriptor (fstat) the
/// answer is about what was opened, so a node swapped at its path cannot slip through.
public struct CharacterDevice: Sendable, Hashable, CustomStringConvertible {
    public let major: UInt32
    public let minor: UInt32
    /// The device number as stat gives it (`st_rdev`).
    public let number: UInt64
    /// Which node this is: the file system's device and the node's inode.
    public let node: FileKey
    public let owner: UInt32

    init?(_ info: stat) {
        guard info.st_mode & S_IFMT == S_IFCHR else { return nil }
        major = devaccess_major(info.st_rdev)
        minor = devaccess_minor(info.st_rdev)
        number = UInt64(info.st_rdev)
        node = FileKey(info)
        owner = info.st_uid
    }

    /// What `fd` refers to; nil when it is no character device.
    public static func of(_ fd: CInt) throws(SystemCallError) -> CharacterDevice? {
        var info = stat()
        try SystemCall.check("fstat") { fstat(fd, &info) }
        return CharacterDevice(info)
    }

    /// What `path` names, the last component not followed (lstat: a symlink is no device);
    /// `following`, stat: a /proc/PID/fd link counts for the file it names.
    public static func at(_ path: String, following: Bool = false) throws(SystemCallError) -> CharacterDevice? {
        var info = stat()
        if following {
            try SystemCall.check("stat", path: path) { stat(path, &info) }
        } else {
            try SystemCall.check("lstat", path: path) { lstat(path, &info) }
        }
        return CharacterDevice(info)
    }

    /// Whether this is device `major`:`minor`.
    public func isDevice(major: UInt32, minor: UInt32) -> Bool { self.major == major && self.minor == minor }

    public var description: String { "character device \(major):\(minor)" }

    /// The device numbers of the character device that `name` under `directory` names (a
    /// /proc/PID/fd link), as the kernel last knew it (`AT_STATX_DONT_SYNC`, the type
    /// alone: a scan of every process's descriptors asks no more); nil for anything else.
    public static func numbers(of name: UnsafePointer<CChar>, in directory: CInt) -> (major: UInt32, minor: UInt32)? {
        var info = statx()
        guard devaccess_statx(directory, name, AT_STATX_DONT_SYNC, UInt32(STATX_TYPE), &info) == 0,
              UInt32(info.stx_mode) & S_IFMT == S_IFCHR else { return nil }
        return (info.stx_rdev_major, info.stx_rdev_minor)
    }
}
