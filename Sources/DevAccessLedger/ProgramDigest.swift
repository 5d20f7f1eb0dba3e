import Glibc
import CCrypto
import DevAccessSystem

/// SHA-256 of a program file, for the audit trail of a run.
public enum ProgramDigest {
    /// Files larger than this are not hashed: devaccessd reads all of a file on a request
    /// thread, and a user's sparse executable of terabytes took those threads for hours.
    public static let auditLimit: Int64 = 64 << 20

    /// Lowercase hex SHA-256 of what `descriptor` reads from its start; `.tooLarge` past
    /// `limit` bytes (a file that grows while it is read is not read forever).
    public static func sha256(descriptor: CInt, limit: Int64 = auditLimit) throws(LedgerError) -> String {
        let hasher = try SHA256Hasher()
        return try hasher.file(descriptor, limit: limit)
    }
}

extension SHA256Hasher {
    func file(_ descriptor: CInt, limit: Int64) throws(LedgerError) -> String {
        guard EVP_DigestInit_ex2(context, algorithm, nil) == 1 else { throw .crypto("EVP_DigestInit_ex2 failed") }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count: Int
            do {
                count = try SystemCall.value("pread") {
                    buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, offset) }
                }
            } catch {
                throw .programUnreadable(error)
            }
            if count == 0 { break }
            offset += off_t(count)
            guard Int64(offset) <= limit else {
                throw .crypto("the program is larger than \(limit >> 20) MiB, the most devaccessd reads to hash one")
            }
            let ok = buffer.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, count) }
            guard ok == 1 else { throw .crypto("EVP_DigestUpdate failed") }
        }
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        guard ok == 1, length == 32 else { throw .crypto("EVP_DigestFinal_ex failed") }
        return out.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }
}
