import Glibc
import CLinux
import DevAccessCore

/// Opens a device node for someone else (devaccessd's `open`), so that what gets opened
/// is the character device the caller was granted and nothing else: the last path
/// component is never a symlink, and after the open the descriptor itself must be a
/// character device with the expected numbers (a node swapped meanwhile fails here).
public enum NodeOpener {
    public enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case open(path: String, Errno)
        case notTheDevice(path: String, found: String)

        public var description: String {
            switch self {
            case .open(let path, let error): return "cannot open \(path): \(error)"
            case .notTheDevice(let path, let found):
                return "\(path) is no longer the device's node (\(found)); nothing was opened"
            }
        }
    }

    /// A blocking descriptor of `path` opened for `access` (read, write or both), checked
    /// to be character device `major`:`minor`. The caller owns it (close-on-exec).
    public static func open(_ path: String, access: AccessMode, major: UInt32, minor: UInt32) throws(Problem) -> CInt {
        let mode: CInt = access.contains(.read) && access.contains(.write) ? O_RDWR : access.contains(.write) ? O_WRONLY : O_RDONLY
        // O_NONBLOCK: a device that waits in open (a modem line) must not hold a broker
        // thread; cleared below, so the caller gets the usual blocking descriptor.
        let descriptor: FileDescriptor
        do {
            descriptor = try .open(path, mode | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        } catch {
            throw .open(path: path, error.errno)
        }
        let device: CharacterDevice?
        do {
            device = try CharacterDevice.of(descriptor.rawValue)
        } catch {
            throw .open(path: path, error.errno)
        }
        guard let device, device.isDevice(major: major, minor: minor) else {
            throw .notTheDevice(path: path, found: device.map { "\($0), expected \(major):\(minor)" }
                ?? "not a character device")
        }
        let fd = descriptor.release()
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
        return fd
    }
}
