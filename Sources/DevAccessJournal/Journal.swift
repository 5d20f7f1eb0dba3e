import Glibc
import CSystemd

/// The systemd journal's native protocol: one entry of `NAME=value` fields.
public enum Journal {
    /// Sends one entry with sd_journal_sendv(3). Values may hold newlines or any byte:
    /// every field goes into one contiguous buffer, so each iovec points into memory
    /// valid for the whole call. Returns whether journald took it (false: not running,
    /// or the entry was refused; the caller decides whether that matters).
    @discardableResult
    public static func send(_ fields: [String]) -> Bool {
        var buffer: [UInt8] = []
        var ranges: [Range<Int>] = []
        for field in fields {
            let start = buffer.count
            buffer += field.utf8
            ranges.append(start..<buffer.count)
        }
        return buffer.withUnsafeMutableBytes { raw -> Bool in
            guard let base = raw.baseAddress else { return false }
            let vectors = ranges.map { iovec(iov_base: base + $0.lowerBound, iov_len: $0.count) }
            return sd_journal_sendv(vectors, Int32(vectors.count)) >= 0
        }
    }
}
