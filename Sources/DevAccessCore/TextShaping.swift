/// The few text operations the commands and the daemon need from Foundation's, written
/// here so no executable links Foundation (and ICU) for them: start-up time is dominated by
/// loading it (issue 17). ASCII rules on purpose: the inputs are /proc files, config lines
/// and our own tables.
extension StringProtocol {
    /// Without leading and trailing ASCII whitespace (space, tab, CR, LF, VT, FF).
    public func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { " \t\n\r\u{0B}\u{0C}\r\n".contains($0) }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }

    /// Padded with spaces on the right to `width` characters; longer text is kept whole.
    public func padded(to width: Int) -> String {
        count >= width ? String(self) : String(self) + String(repeating: " ", count: width - count)
    }
}

/// Orders names as people count: `video2` before `video10` (runs of ASCII digits compare
/// as numbers, everything else byte by byte), as `ls -v` does.
public enum NaturalOrder {
    public static func precedes(_ left: String, _ right: String) -> Bool {
        var a = Array(left.utf8)[...], b = Array(right.utf8)[...]
        func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }
        while let x = a.first, let y = b.first {
            if isDigit(x) && isDigit(y) {
                let runA = a.prefix(while: isDigit), runB = b.prefix(while: isDigit)
                let numberA = runA.drop(while: { $0 == 48 }), numberB = runB.drop(while: { $0 == 48 })
                if numberA.count != numberB.count { return numberA.count < numberB.count }
                if !numberA.elementsEqual(numberB) { return numberA.lexicographicallyPrecedes(numberB) }
                if runA.count != runB.count { return runA.count < runB.count }
                a = a.dropFirst(runA.count)
                b = b.dropFirst(runB.count)
            } else {
                if x != y { return x < y }
                a = a.dropFirst()
                b = b.dropFirst()
            }
        }
        return a.isEmpty && !b.isEmpty
    }
}
