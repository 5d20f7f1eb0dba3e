import Glibc
import CLinux

/// One `struct inotify_event` as read from an inotify descriptor.
public struct InotifyRecord: Sendable, Hashable {
    /// The watch descriptor (`inotify_add_watch`'s return); -1 with `IN_Q_OVERFLOW`.
    public var watch: Int32
    public var mask: UInt32
    /// The entry's name inside a watched directory; empty for the watched object itself.
    public var name: String

    public init(watch: Int32, mask: UInt32, name: String) {
        self.watch = watch
        self.mask = mask
        self.name = name
    }
}

/// Reads inotify's queue: the one place that decodes the kernel's variable-length records,
/// for every inotify user of devaccessd (live enforcement's watches, the status cache).
public struct InotifyReader: Sendable {
    private var buffer: [UInt8]

    /// `capacity`: bytes read per `read(2)`; at least one record with a full name fits.
    public init(capacity: Int = 16 * 1024) {
        buffer = [UInt8](repeating: 0, count: max(capacity, 16 + Int(NAME_MAX) + 1))
    }

    /// The records the queue holds when this is called, and no more: records queued while
    /// it reads are left for the next call, so a process that keeps making events (any user
    /// can open /dev/null for writing) cannot keep the reader here. The descriptor must be
    /// non-blocking (IN_NONBLOCK): reading also stops when the queue is empty or fails.
    public mutating func drain(_ descriptor: Int32) -> [InotifyRecord] {
        var records: [InotifyRecord] = []
        let queued = devaccess_queued_bytes(descriptor)
        // FIONREAD failed: one read's worth, never an unbounded loop.
        var left = queued < 0 ? buffer.count : Int(queued)
        while left > 0 {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return records }
            records += Self.decode(buffer, count: count)
            left -= count
        }
        return records
    }

    /// The records in the first `count` bytes of `bytes`: `int wd; uint32_t mask, cookie,
    /// len; char name[len]` (NUL-padded), one after another.
    static func decode(_ bytes: [UInt8], count: Int) -> [InotifyRecord] {
        var records: [InotifyRecord] = []
        bytes.withUnsafeBytes { raw in
            var offset = 0
            let header = 16
            while offset + header <= count {
                let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                let nameBytes = raw[(offset + header)..<min(count, offset + header + length)]
                offset += header + length
                records.append(InotifyRecord(watch: wd, mask: mask,
                                             name: String(decoding: nameBytes.prefix { $0 != 0 }, as: UTF8.self)))
            }
        }
        return records
    }
}
