import Glibc
import CV4L2Lib

/// One frame from a V4L2 capture node as RGB24, through libv4l2 (v4l2_fd_open on the
/// descriptor devaccessd passed): asked for RGB24, libv4l2 picks a format the camera offers
/// (MJPEG, YUYV, NV12, Bayer, ...) and libv4lconvert converts each frame in libv4l2's mmap
/// emulation. With a native format (`--native`) libv4l2's conversion is off, so the camera
/// delivers exactly that format, and the frame goes through libv4lconvert here: the
/// converter libv4l2 itself calls.
struct V4L2Capture {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ step: String, _ result: CInt) {
            description = "\(step) failed: \(String(cString: strerror(-result)))"
        }
        init(_ text: String) { description = text }
    }

    /// RGB24 pixels, rows packed (width * 3 bytes each).
    struct Frame {
        var width: Int
        var height: Int
        var bytes: [UInt8]
    }

    /// A FOURCC such as "NV12" or "BA81" as V4L2 numbers it; nil unless four printable characters.
    static func fourcc(_ text: String) -> UInt32? {
        let bytes = Array(text.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ (0x20..<0x7f).contains($0) }) else { return nil }
        return code(bytes)
    }

    static func name(_ code: UInt32) -> String {
        String(decoding: (0..<4).map { UInt8(truncatingIfNeeded: code >> (8 * $0)) }, as: UTF8.self)
    }

    static let rgb24 = code(Array("RGB3".utf8))

    private static func code(_ bytes: [UInt8]) -> UInt32 {
        bytes.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }

    /// Owned from here on: libv4l2 closes it.
    let fd: CInt
    /// nil: RGB24, converted by libv4l2 from what the camera offers.
    let native: UInt32?

    func captureOne(width: Int = 640, height: Int = 480) throws -> Frame {
        let device = try LibV4L2Device(taking: fd, converting: native == nil)
        defer { device.close() }
        let format = try device.setFormat(native ?? Self.rgb24, width: width, height: height)
        let delivered = try device.grab()
        let pixels = format.fmt.pix.pixelformat == Self.rgb24
            ? Self.packed(delivered, format) : try Self.convert(delivered, format, device: device.fd)
        return Frame(width: Int(format.fmt.pix.width), height: Int(format.fmt.pix.height), bytes: pixels)
    }

    /// RGB24 rows without the driver's padding past width * 3.
    private static func packed(_ bytes: [UInt8], _ format: v4l2_format) -> [UInt8] {
        let width = Int(format.fmt.pix.width) * 3, stride = max(Int(format.fmt.pix.bytesperline), width)
        var out: [UInt8] = []
        out.reserveCapacity(width * Int(format.fmt.pix.height))
        for row in 0..<Int(format.fmt.pix.height) where row * stride + width <= bytes.count {
            out += bytes[row * stride..<row * stride + width]
        }
        return out
    }

    /// A native frame to RGB24 by libv4lconvert (v4lconvert_convert, as libv4l2 does it).
    private static func convert(_ bytes: [UInt8], _ format: v4l2_format, device fd: CInt) throws -> [UInt8] {
        guard let converter = v4lconvert_create(fd) else { throw Failure("libv4lconvert could not start on the camera") }
        defer { v4lconvert_destroy(converter) }
        var source = format, target = format
        target.fmt.pix.pixelformat = rgb24
        target.fmt.pix.bytesperline = format.fmt.pix.width * 3
        target.fmt.pix.sizeimage = target.fmt.pix.bytesperline * format.fmt.pix.height
        var input = bytes
        var output = [UInt8](repeating: 0, count: Int(target.fmt.pix.sizeimage))
        let written = input.withUnsafeMutableBufferPointer { input in
            output.withUnsafeMutableBufferPointer { output in
                v4lconvert_convert(converter, &source, &target, input.baseAddress, CInt(input.count),
                                   output.baseAddress, CInt(output.count))
            }
        }
        guard written >= 0 else {
            let reason = v4lconvert_get_error_message(converter).map { String(cString: $0) } ?? "no reason given"
            throw Failure("libv4lconvert cannot convert \(name(format.fmt.pix.pixelformat)) to RGB24 "
                          + "(\(reason.trimmingSuffix("\n"))); pick another --native format (v4l2-ctl --list-formats)")
        }
        guard written == output.count else {
            throw Failure("libv4lconvert made \(written) bytes of a \(output.count)-byte RGB24 frame")
        }
        return output
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String { hasSuffix(suffix) ? String(dropLast(suffix.count)) : self }
}
