import CV4L2
import CLinux
import Glibc
import DevAccessSystem

/// What VIDIOC_QUERYCAP says about one video node.
public struct V4L2Capability: Sendable, Hashable {
    public var driver: String
    public var card: String
    public var busInfo: String
    /// The capabilities of this node (device_caps when the driver sets them).
    public var nodeCapabilities: UInt32

    public var isVideoCapture: Bool {
        nodeCapabilities & (UInt32(V4L2_CAP_VIDEO_CAPTURE) | UInt32(V4L2_CAP_VIDEO_CAPTURE_MPLANE)) != 0
            && nodeCapabilities & UInt32(V4L2_CAP_TOUCH) == 0
    }

    /// Short words for what the node does, like udev's ID_V4L_CAPABILITIES.
    public var roles: [String] {
        let table: [(UInt32, String)] = [
            (UInt32(V4L2_CAP_VIDEO_CAPTURE) | UInt32(V4L2_CAP_VIDEO_CAPTURE_MPLANE), "capture"),
            (UInt32(V4L2_CAP_VIDEO_OUTPUT) | UInt32(V4L2_CAP_VIDEO_OUTPUT_MPLANE), "video_output"),
            (UInt32(V4L2_CAP_META_CAPTURE), "meta_capture"),
            (UInt32(V4L2_CAP_META_OUTPUT), "meta_output"),
            (UInt32(V4L2_CAP_VBI_CAPTURE) | UInt32(V4L2_CAP_SLICED_VBI_CAPTURE), "vbi_capture"),
            (UInt32(V4L2_CAP_VBI_OUTPUT) | UInt32(V4L2_CAP_SLICED_VBI_OUTPUT), "vbi_output"),
            (UInt32(V4L2_CAP_RADIO), "radio"),
            (UInt32(V4L2_CAP_SDR_CAPTURE), "sdr_capture"),
            (UInt32(V4L2_CAP_TOUCH), "touch"),
        ]
        return table.filter { nodeCapabilities & $0.0 != 0 }.map(\.1)
    }

    public enum QueryError: Error, Equatable, CustomStringConvertible {
        case open(Errno)
        case notTheDevice(expected: String)
        case ioctl(Errno)

        public var description: String {
            switch self {
            case .open(let errno): return "opening it for VIDIOC_QUERYCAP failed: \(errno)"
            case .notTheDevice(let expected): return "it is not the character device \(expected) udev reports"
            case .ioctl(let errno): return "VIDIOC_QUERYCAP failed: \(errno)"
            }
        }
    }

    /// Asks a node for its capabilities. The path is first pinned with
    /// O_PATH|O_NOFOLLOW and checked to be the character device udev reported; only
    /// then is the device itself opened, through /proc/self/fd, so a symlink or a
    /// swapped node is never opened. O_NONBLOCK: never wait for a busy device;
    /// QUERYCAP does not start streaming or turn on a camera's LED.
    public static func query(node: String, major: UInt32, minor: UInt32) throws(QueryError) -> V4L2Capability {
        let pinned: FileDescriptor
        do {
            pinned = try FileDescriptor.openPath(node)
        } catch {
            throw .open(error.errno)
        }
        guard let device = try? CharacterDevice.of(pinned.rawValue), device.isDevice(major: major, minor: minor) else {
            throw .notTheDevice(expected: "\(major):\(minor)")
        }
        let opened: FileDescriptor
        do {
            opened = try .open(pinned.procPath, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        } catch {
            throw .open(error.errno)
        }
        let fd = opened.rawValue
        var capability = v4l2_capability()
        let rc = devaccess_v4l2_querycap(fd, &capability)
        if rc < 0 { throw .ioctl(Errno(rawValue: -rc)) }
        let caps = capability.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0
            ? capability.device_caps : capability.capabilities
        return V4L2Capability(driver: cString(capability.driver), card: cString(capability.card),
                              busInfo: cString(capability.bus_info), nodeCapabilities: caps)
    }

    /// Reads a fixed-size, NUL-padded C char array (imported as a tuple).
    static func cString<T>(_ tuple: T) -> String {
        withUnsafeBytes(of: tuple) { raw in
            let bytes = raw.prefix { $0 != 0 }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
}
