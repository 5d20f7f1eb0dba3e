import Glibc
import CV4L2

/// One frame from a V4L2 capture node by mmap streaming: set a format, map two driver
/// buffers, queue them, start streaming, take the first filled one, stop.
struct V4L2Capture {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ step: String, _ result: CInt) {
            description = "\(step) failed: \(String(cString: strerror(-result)))"
        }
        init(_ text: String) { description = text }
    }

    struct Frame {
        var width: Int
        var height: Int
        var bytesPerLine: Int
        var pixelFormat: UInt32
        var bytes: [UInt8]
    }

    static func fourcc(_ text: String) -> UInt32 {
        text.utf8.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }

    static let rgb24 = fourcc("RGB3")
    static let yuyv = fourcc("YUYV")

    let fd: CInt

    func captureOne(width: Int = 640, height: Int = 480) throws -> Frame {
        var capability = v4l2_capability()
        let queried = devaccess_v4l2_querycap(fd, &capability)
        guard queried == 0 else {
            throw Failure("VIDIOC_QUERYCAP failed (\(String(cString: strerror(-queried)))): not a V4L2 device")
        }
        let caps = capability.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? capability.device_caps
            : capability.capabilities
        guard caps & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0, caps & UInt32(V4L2_CAP_STREAMING) != 0 else {
            throw Failure("the node does not capture video by streaming")
        }

        // RGB24 if the driver has it (vivid does), else YUYV, which nearly every camera has.
        var format = v4l2_format()
        format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        format.fmt.pix.width = UInt32(width)
        format.fmt.pix.height = UInt32(height)
        format.fmt.pix.pixelformat = Self.rgb24
        format.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        var set = devaccess_v4l2_s_fmt(fd, &format)
        if set == 0 && format.fmt.pix.pixelformat != Self.rgb24 {
            format.fmt.pix.pixelformat = Self.yuyv
            set = devaccess_v4l2_s_fmt(fd, &format)
        }
        guard set == 0 else { throw Failure("VIDIOC_S_FMT", set) }
        let pixelFormat = format.fmt.pix.pixelformat
        guard pixelFormat == Self.rgb24 || pixelFormat == Self.yuyv else {
            throw Failure("the camera offers neither RGB24 nor YUYV")
        }

        var request = v4l2_requestbuffers()
        request.count = 2
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        let requested = devaccess_v4l2_reqbufs(fd, &request)
        guard requested == 0, request.count > 0 else { throw Failure("VIDIOC_REQBUFS", requested == 0 ? -ENOMEM : requested) }

        var mappings: [(pointer: UnsafeMutableRawPointer, length: Int)] = []
        defer { for mapping in mappings { munmap(mapping.pointer, mapping.length) } }
        for index in 0..<request.count {
            var buffer = v4l2_buffer()
            buffer.type = request.type
            buffer.memory = request.memory
            buffer.index = index
            let found = devaccess_v4l2_querybuf(fd, &buffer)
            guard found == 0 else { throw Failure("VIDIOC_QUERYBUF", found) }
            let offset = off_t(devaccess_v4l2_buffer_offset(&buffer))
            guard let pointer = mmap(nil, Int(buffer.length), PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset),
                  pointer != MAP_FAILED else {
                throw Failure("mmap", -errno)
            }
            mappings.append((pointer, Int(buffer.length)))
            let queued = devaccess_v4l2_qbuf(fd, &buffer)
            guard queued == 0 else { throw Failure("VIDIOC_QBUF", queued) }
        }
        let started = devaccess_v4l2_streamon(fd)
        guard started == 0 else { throw Failure("VIDIOC_STREAMON", started) }
        defer { _ = devaccess_v4l2_streamoff(fd) }

        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&ready, 1, 5_000) == 1 else { throw Failure("no frame within 5 s") }
        var filled = v4l2_buffer()
        filled.type = request.type
        filled.memory = request.memory
        let taken = devaccess_v4l2_dqbuf(fd, &filled)
        guard taken == 0 else { throw Failure("VIDIOC_DQBUF", taken) }
        guard Int(filled.index) < mappings.count else { throw Failure("the driver returned an unknown buffer") }
        let mapping = mappings[Int(filled.index)]
        let used = min(Int(filled.bytesused), mapping.length)
        let bytes = Array(UnsafeRawBufferPointer(start: mapping.pointer, count: used))
        return Frame(width: Int(format.fmt.pix.width), height: Int(format.fmt.pix.height),
                     bytesPerLine: Int(format.fmt.pix.bytesperline), pixelFormat: pixelFormat, bytes: bytes)
    }
}
