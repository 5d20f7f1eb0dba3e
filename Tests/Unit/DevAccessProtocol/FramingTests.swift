import Testing
@testable import DevAccessProtocol

struct FramingTests {
    @Test func splitsLinesAcrossReads() {
        var framer = LineFramer(maxLineLength: 100)
        framer.append(Array("ab".utf8))
        #expect(framer.next() == .needMore)
        framer.append(Array("c\nde\n\nf".utf8))
        #expect(framer.next() == .line(Array("abc".utf8)))
        #expect(framer.next() == .line(Array("de".utf8)))
        #expect(framer.next() == .line([]))
        #expect(framer.next() == .needMore)
        #expect(framer.pendingByteCount == 1, "'f' is a message truncated if the stream ends now")
    }

    @Test func exactlyTheLimitIsAcceptedOneMoreIsTooLarge() {
        let limit = BrokerProtocol.maxRequestSize
        var framer = LineFramer(maxLineLength: limit)
        framer.append([UInt8](repeating: 0x20, count: limit) + [0x0a])
        #expect(framer.next() == .line([UInt8](repeating: 0x20, count: limit)))

        var over = LineFramer(maxLineLength: limit)
        over.append([UInt8](repeating: 0x20, count: limit))
        #expect(over.next() == .needMore)
        over.append([0x20])
        #expect(over.next() == .tooLarge, "refused before any newline arrives")
    }

    @Test func anOverlongLineWithItsNewlineIsTooLarge() {
        var framer = LineFramer(maxLineLength: 10)
        framer.append(Array("01234567890\n".utf8))
        #expect(framer.next() == .tooLarge)
    }

    @Test func manySmallReadsDoNotRescanTheBuffer() {
        // 64 KiB arriving one byte at a time must stay linear.
        var framer = LineFramer(maxLineLength: BrokerProtocol.maxRequestSize)
        for _ in 0..<BrokerProtocol.maxRequestSize {
            framer.append([0x61])
            #expect(framer.next() == .needMore)
        }
        framer.append([0x0a])
        guard case .line(let line) = framer.next() else {
            Issue.record("no line")
            return
        }
        #expect(line.count == BrokerProtocol.maxRequestSize)
    }

    @Test func bufferIsCompactedAfterLinesAreTaken() {
        var framer = LineFramer(maxLineLength: 16)
        for round in 0..<10_000 {
            framer.append(Array("line \(round % 10)\n".utf8))
            #expect(framer.next() == .line(Array("line \(round % 10)".utf8)))
        }
        #expect(framer.pendingByteCount == 0)
    }
}
