import Glibc

/// Decimal text with a fixed number of fraction digits: exactly what printf's `%.Nf`
/// writes (glibc's exact decimal expansion, ties to even), without Foundation's
/// `String(format:)`.
public enum DecimalText {
    public static func fixed(_ value: Double, digits: Int) -> String {
        let format = "%.\(max(0, min(digits, 17)))f"
        var buffer = [CChar](repeating: 0, count: 384)
        let written = withVaList([value]) { arguments in
            buffer.withUnsafeMutableBufferPointer { vsnprintf($0.baseAddress, $0.count, format, arguments) }
        }
        guard written >= 0, Int(written) < buffer.count else { return String(value) }
        return String(decoding: buffer[..<Int(written)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
