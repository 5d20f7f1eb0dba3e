import Glibc
import CV4L2Lib

/// A capture node opened through libv4l2: its format, and one frame by mmap streaming
/// (libv4l2's emulation maps its converted buffers when it converts, the driver's otherwise).
struct LibV4L2Device {
    typealias Failure = V4L2Capture.Failure
    let fd: CInt

    /// Takes `fd` (closed by ``close()``, or here on failure). `converting` false:
    /// V4L2_DISABLE_CONVERSION, the camera's own format reaches the caller.
    init(taking fd: CInt, converting: Bool) throws {
        guard v4l2_fd_open(fd, converting ? 0 : V4L2_DISABLE_CONVERSION) == fd else {
            let reason = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw Failure("libv4l2 cannot use the node (\(reason)): not a V4L2 device")
        }
        self.fd = fd
        var capability = v4l2_capability()
        let queried = devaccess_libv4l2_querycap(fd, &capability)
        let caps = capability.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? capability.device_caps
            : capability.capabilities
        guard queried == 0, caps & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0, caps & UInt32(V4L2_CAP_STREAMING) != 0 else {
            close()
            throw Failure("the node does not capture video by streaming")
        }
    }

    func close() { _ = v4l2_close(fd) }

    /// Sets `pixelFormat` at about width x height; fails unless the camera (or libv4l2's
    /// conversion) delivers exactly that format.
    func setFormat(_ pixelFormat: UInt32, width: Int, height: Int) throws -> v4l2_format {
        var format = v4l2_format()
        format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        format.fmt.pix.width = UInt32(width)
        format.fmt.pix.height = UInt32(height)
        format.fmt.pix.pixelformat = pixelFormat
        format.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        let set = devaccess_libv4l2_s_fmt(fd, &format)
        guard set == 0 else { throw Failure("VIDIOC_S_FMT \(V4L2Capture.name(pixelFormat))", set) }
        guard format.fmt.pix.pixelformat == pixelFormat else {
            throw Failure("the camera does not deliver \(V4L2Capture.name(pixelFormat)) (it offered "
                          + "\(V4L2Capture.name(format.fmt.pix.pixelformat)); see v4l2-ctl --list-formats)")
        }
        return format
    }

    /// The first frame that arrives within 5 s, as libv4l2 hands it over. A frame libv4l2
    /// could not convert (EAGAIN: a corrupt MJPEG frame, say) is queued again, twice at most.
    func grab() throws -> [UInt8] {
        let mappings = try mapBuffers(count: 2)
        defer { for mapping in mappings { _ = v4l2_munmap(mapping.start, mapping.length) } }
        let started = devaccess_libv4l2_streamon(fd)
        guard started == 0 else { throw Failure("VIDIOC_STREAMON", started) }
        defer { _ = devaccess_libv4l2_streamoff(fd) }
        for _ in 0..<3 {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 5_000) == 1 else { throw Failure("no frame within 5 s") }
            var filled = Self.buffer(index: 0)
            let taken = devaccess_libv4l2_dqbuf(fd, &filled)
            if taken == -EAGAIN && Int(filled.index) < mappings.count {
                _ = devaccess_libv4l2_qbuf(fd, &filled)
                continue
            }
            guard taken == 0 else { throw Failure("VIDIOC_DQBUF", taken) }
            guard Int(filled.index) < mappings.count else { throw Failure("the driver returned an unknown buffer") }
            let mapping = mappings[Int(filled.index)]
            return Array(UnsafeRawBufferPointer(start: mapping.start, count: min(Int(filled.bytesused), mapping.length)))
        }
        throw Failure("three frames in a row could not be converted")
    }

    private static func buffer(index: UInt32) -> v4l2_buffer {
        var buffer = v4l2_buffer()
        buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        buffer.memory = V4L2_MEMORY_MMAP.rawValue
        buffer.index = index
        return buffer
    }

    /// Requests, maps (v4l2_mmap) and queues the capture buffers.
    private func mapBuffers(count: UInt32) throws -> [(start: UnsafeMutableRawPointer, length: Int)] {
        var request = v4l2_requestbuffers()
        request.count = count
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        let requested = devaccess_libv4l2_reqbufs(fd, &request)
        guard requested == 0, request.count > 0 else { throw Failure("VIDIOC_REQBUFS", requested == 0 ? -ENOMEM : requested) }
        var mappings: [(start: UnsafeMutableRawPointer, length: Int)] = []
        do {
            for index in 0..<request.count {
                var buffer = Self.buffer(index: index)
                let found = devaccess_libv4l2_querybuf(fd, &buffer)
                guard found == 0 else { throw Failure("VIDIOC_QUERYBUF", found) }
                let offset = Int64(devaccess_libv4l2_buffer_offset(&buffer))
                guard let start = v4l2_mmap(nil, Int(buffer.length), PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset),
                      start != MAP_FAILED else { throw Failure("v4l2_mmap", -errno) }
                mappings.append((start, Int(buffer.length)))
                let queued = devaccess_libv4l2_qbuf(fd, &buffer)
                guard queued == 0 else { throw Failure("VIDIOC_QBUF", queued) }
            }
        } catch {
            for mapping in mappings { _ = v4l2_munmap(mapping.start, mapping.length) }
            throw error
        }
        return mappings
    }
}
