import Glibc
import CCrypto

/// SHA-256 of a program file, for program grants that pin it and for the audit trail.
public enum ProgramDigest {
    /// Files larger than this are not hashed for the audit trail (a grant that pins a hash
    /// still needs one, and gets it).
    public static let auditLimit: Int64 = 64 << 20

    /// Lowercase hex SHA-256 of what `descriptor` reads from its start.
    public static func sha256(descriptor: CInt) throws(LedgerError) -> String {
        let hasher = try SHA256Hasher()
        return try hasher.file(descriptor)
    }
}

extension SHA256Hasher {
    func file(_ descriptor: CInt) throws(LedgerError) -> String {
        guard EVP_DigestInit_ex2(context, algorithm, nil) == 1 else { throw .crypto("EVP_DigestInit_ex2 failed") }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, offset) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .crypto("reading the program to hash it failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            offset += off_t(count)
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
