import CCrypto

/// SHA-256 through libcrypto's EVP interface. One instance is reused for a whole
/// batch: the algorithm is fetched once and the context re-initialised per digest.
struct SHA256Hasher: ~Copyable {
    let context: OpaquePointer
    let algorithm: OpaquePointer

    init() throws(LedgerError) {
        guard let algorithm = EVP_MD_fetch(nil, "SHA256", nil) else {
            throw .crypto("EVP_MD_fetch(SHA256) returned NULL (no default provider?)")
        }
        guard let context = EVP_MD_CTX_new() else {
            EVP_MD_free(algorithm)
            throw .crypto("EVP_MD_CTX_new returned NULL (out of memory)")
        }
        self.algorithm = algorithm
        self.context = context
    }

    deinit {
        EVP_MD_CTX_free(context)
        EVP_MD_free(algorithm)
    }

    /// SHA-256 of the concatenated parts (32 bytes).
    func digest(_ parts: [UInt8]...) throws(LedgerError) -> [UInt8] {
        guard EVP_DigestInit_ex2(context, algorithm, nil) == 1 else { throw .crypto("EVP_DigestInit_ex2 failed") }
        for part in parts {
            let ok = part.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
            guard ok == 1 else { throw .crypto("EVP_DigestUpdate failed") }
        }
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        guard ok == 1, length == 32 else { throw .crypto("EVP_DigestFinal_ex failed") }
        return out
    }

    /// The chain hash of an event: SHA-256(prev_hash bytes || canonical bytes), as hex.
    func chainHash(previous: [UInt8], canonical: [UInt8]) throws(LedgerError) -> String {
        Hex.encode(try digest(previous, canonical))
    }
}

enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes lowercase or uppercase hex; nil for anything else or an odd length.
    static func decode<S: Sequence>(_ text: S) -> [UInt8]? where S.Element == UInt8 {
        var out = [UInt8]()
        var high: UInt8?
        for char in text {
            let value: UInt8
            switch char {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = char - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = char - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = char - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let h = high {
                out.append(h << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return high == nil ? out : nil
    }
}
