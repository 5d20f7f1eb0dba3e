/// A frame as binary PPM (P6): a header and RGB triples, which every image viewer reads.
enum PPM {
    static func encode(_ frame: V4L2Capture.Frame) -> [UInt8] {
        var out = Array("P6\n\(frame.width) \(frame.height)\n255\n".utf8)
        out.reserveCapacity(out.count + frame.width * frame.height * 3)
        let stride = frame.bytesPerLine
        for row in 0..<frame.height {
            let start = row * stride
            if frame.pixelFormat == V4L2Capture.rgb24 {
                let end = min(start + frame.width * 3, frame.bytes.count)
                guard start < end else { break }
                out += frame.bytes[start..<end]
                continue
            }
            // YUYV: two pixels per four bytes (Y0 U Y1 V), BT.601.
            var column = 0
            while column + 1 < frame.width, start + column * 2 + 3 < frame.bytes.count {
                let base = start + column * 2
                let u = Double(frame.bytes[base + 1]) - 128, v = Double(frame.bytes[base + 3]) - 128
                for y in [frame.bytes[base], frame.bytes[base + 2]] {
                    let luma = Double(y)
                    out.append(clamp(luma + 1.402 * v))
                    out.append(clamp(luma - 0.344 * u - 0.714 * v))
                    out.append(clamp(luma + 1.772 * u))
                }
                column += 2
            }
        }
        return out
    }

    private static func clamp(_ value: Double) -> UInt8 { UInt8(max(0, min(255, value.rounded()))) }
}
