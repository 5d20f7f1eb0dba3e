/// A frame as binary PPM (P6): a header and RGB triples, which every image viewer reads.
enum PPM {
    static func encode(_ frame: V4L2Capture.Frame) -> [UInt8] {
        Array("P6\n\(frame.width) \(frame.height)\n255\n".utf8) + frame.bytes
    }
}
