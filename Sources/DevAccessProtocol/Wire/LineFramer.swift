/// Splits a byte stream into newline-terminated lines of bounded length.
///
/// Used by the broker (requests, 64 KiB) and the client (replies, 1 MiB). A line
/// longer than the limit is refused as soon as more than `maxLineLength` bytes have
/// arrived without a newline: the framer never buffers more than the limit plus one
/// read.
public struct LineFramer: Sendable {
    public enum Next: Sendable, Hashable {
        /// One complete line, without its newline.
        case line([UInt8])
        /// No complete line yet.
        case needMore
        /// More than `maxLineLength` bytes before a newline; the stream cannot be
        /// resynchronised and should be closed.
        case tooLarge
    }

    public let maxLineLength: Int
    private var buffer: [UInt8] = []
    /// Where the unread part of `buffer` starts.
    private var start = 0
    /// Where the search for the next newline resumes (bytes before it hold none).
    private var scanned = 0

    public init(maxLineLength: Int) {
        self.maxLineLength = maxLineLength
    }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            scanned -= start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    public mutating func next() -> Next {
        var position = max(start, scanned)
        while position < buffer.count {
            if buffer[position] == 0x0a {
                let length = position - start
                if length > maxLineLength { return .tooLarge }
                let line = Array(buffer[start..<position])
                start = position + 1
                scanned = start
                return .line(line)
            }
            position += 1
        }
        scanned = position
        return buffer.count - start > maxLineLength ? .tooLarge : .needMore
    }

    /// Whether `next()` would return a line now.
    public var hasCompleteLine: Bool {
        buffer[max(start, scanned)...].contains(0x0a)
    }

    /// Bytes received after the last complete line: at end of stream they are a
    /// truncated message.
    public var pendingByteCount: Int { buffer.count - start }
}
