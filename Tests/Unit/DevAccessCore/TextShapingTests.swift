import Testing
import DevAccessCore

@Suite struct TextShapingTests {
    @Test func trimsASCIIWhitespaceOnly() {
        #expect("  a b\t\r\n".trimmingWhitespace() == "a b")
        #expect("\r\n".trimmingWhitespace() == "")
        #expect("".trimmingWhitespace() == "")
        #expect("\u{00A0}x\u{00A0}".trimmingWhitespace() == "\u{00A0}x\u{00A0}", "not ASCII: kept")
        #expect("0\n"[...].trimmingWhitespace() == "0")
    }

    @Test func padsOnTheRightAndNeverCuts() {
        #expect("ab".padded(to: 4) == "ab  ")
        #expect("abcdef".padded(to: 4) == "abcdef")
        #expect("é".padded(to: 2) == "é ", "counts characters, not bytes")
    }

    @Test func ordersNumbersAsNumbers() {
        let names = ["/dev/video10", "/dev/video2", "/dev/video", "/dev/video02", "/dev/audio1", "card1-10", "card1-9"]
        #expect(names.sorted(by: NaturalOrder.precedes)
            == ["/dev/audio1", "/dev/video", "/dev/video2", "/dev/video02", "/dev/video10", "card1-9", "card1-10"])
        #expect(!NaturalOrder.precedes("a", "a"))
    }
}
