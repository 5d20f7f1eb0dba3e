import Foundation
import Glibc
import Testing
import DevAccessProtocol
import DevAccessTestSupport
import DevAccessInterface

/// Bad input gets an error frame naming the problem, then the connection closes; the
/// daemon keeps serving everyone else.
extension DaemonTests {
    /// Writes `bytes` on a fresh connection (then optionally ends the sending side) and
    /// returns the reply; expects the broker to close the connection afterwards.
    func expectRejected(_ daemon: RunningDaemon, _ bytes: [UInt8], endStream: Bool = false,
                        code: ErrorCode, id: Int64 = 0, reasonContains: String? = nil,
                        sourceLocation: SourceLocation = #_sourceLocation) throws {
        let client = try daemon.client()
        try client.writeRaw(bytes)
        if endStream { client.shutdownWriting() }
        let reply = try client.readReply()
        guard case .error(let error) = reply.reply else {
            Issue.record("expected an error frame, got \(reply)", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(reply.id == id, sourceLocation: sourceLocation)
        if let reasonContains {
            #expect(error.reason.contains(reasonContains), "\(error)", sourceLocation: sourceLocation)
        }
        #expect(throws: BrokerClientError.closed(path: daemon.socketPath), "the connection closes",
                sourceLocation: sourceLocation) { try client.readReply() }
        // Everyone else is still served.
        #expect(try daemon.client().hello().server.hasPrefix("devaccessd"), sourceLocation: sourceLocation)
    }

    func line(_ text: String) -> [UInt8] { Array((text + "\n").utf8) }

    @Test func malformedJSON() throws {
        let daemon = try RunningDaemon()
        try expectRejected(daemon, line("not json"), code: .badJSON, reasonContains: "invalid literal")
        try expectRejected(daemon, line("?"), code: .badJSON, reasonContains: "expected a value")
        try expectRejected(daemon, line(#"{"version":1,"id":1,"type":"hello""#), code: .badJSON)
        try expectRejected(daemon, line(""), code: .badJSON, reasonContains: "empty message")
        try expectRejected(daemon, [0x00, 0xff, 0xfe, 0x0a], code: .badJSON)
        try expectRejected(daemon, line("[" + String(repeating: "[", count: 50_000)), code: .badJSON,
                           reasonContains: "nested deeper")
        try expectRejected(daemon, line(#"{"version":1,"id":1,"id":1,"type":"hello"}"#), code: .badJSON,
                           reasonContains: "duplicate key")
        #expect(daemon.process.isRunning)
    }

    @Test func unknownFieldsAtAnyLevel() throws {
        let daemon = try RunningDaemon()
        try expectRejected(daemon, line(#"{"version":1,"id":7,"type":"hello","debug":true}"#), code: .badMessage, id: 7,
                           reasonContains: "unknown field 'debug'")
        try expectRejected(daemon, line(#"{"version":1,"id":8,"type":"status","pid":1}"#), code: .badMessage, id: 8)
    }

    @Test func wrongTypesAndMissingFields() throws {
        let daemon = try RunningDaemon()
        try expectRejected(daemon, line(#"{"version":1,"id":"1","type":"hello"}"#), code: .badMessage)
        try expectRejected(daemon, line(#"{"version":1,"type":"hello"}"#), code: .badMessage,
                           reasonContains: "missing field 'id'")
        try expectRejected(daemon, line(#"{"version":1,"id":2,"type":"status","permissions":"camera"}"#),
                           code: .badMessage, id: 2)
        try expectRejected(daemon, line(#"{"version":1,"id":3,"type":"teleport"}"#), code: .unknownType, id: 3)
    }

    @Test func unknownVersionNamesTheSupportedOne() throws {
        let daemon = try RunningDaemon()
        try expectRejected(daemon, line(#"{"version":9,"id":4,"type":"hello"}"#), code: .unsupportedVersion, id: 4,
                           reasonContains: "protocol version 9 is not supported; this broker speaks version 1")
        try expectRejected(daemon, line(#"{"version":2,"id":5,"type":"status"}"#), code: .unsupportedVersion, id: 5,
                           reasonContains: "protocol version 2 is not supported; this broker speaks version 1")
        // hello tells it, for a client to choose.
        #expect(try daemon.client().hello().versions == [1])
    }

    @Test func oversizeMessages() throws {
        let daemon = try RunningDaemon()
        // No newline at all: refused once 64 KiB + 1 bytes are in, without waiting for one.
        try expectRejected(daemon, [UInt8](repeating: 0x20, count: 70_000), code: .tooLarge,
                           reasonContains: "more than 65536 bytes")
        // A megabyte more, still no newline: the broker discards it and closes.
        try expectRejected(daemon, [UInt8](repeating: 0x41, count: 1 << 20), code: .tooLarge)
        // With its newline, one byte over the limit.
        let padded = #"{"version":1,"id":1,"type":"hello"}"# + String(repeating: " ", count: 65_536 - 35 + 1)
        try expectRejected(daemon, line(padded), code: .tooLarge)
        // Exactly at the limit is fine.
        let client = try daemon.client()
        try client.writeRaw(line(#"{"version":1,"id":1,"type":"hello"}"# + String(repeating: " ", count: 65_536 - 35)))
        #expect(try client.readReply().id == 1)
    }

    @Test func truncatedMessages() throws {
        let daemon = try RunningDaemon()
        try expectRejected(daemon, Array(#"{"version":1,"id":1,"type":"hel"#.utf8), endStream: true, code: .truncated,
                           reasonContains: "ended after 31 bytes")
        // A complete request before the cut is still answered, then the cut is reported.
        let client = try daemon.client()
        try client.writeRaw(line(#"{"version":1,"id":5,"type":"hello"}"#) + Array(#"{"ver"#.utf8))
        client.shutdownWriting()
        #expect(try client.readReply().id == 5)
        guard case .error(let error) = try client.readReply().reply else {
            Issue.record("no truncated error")
            return
        }
        #expect(error.code == .truncated)
    }

    @Test func requestErrorsKeepTheConnectionAndPipelinedRepliesStayInOrder() throws {
        let daemon = try RunningDaemon()
        let client = try daemon.client()
        try client.writeRaw(line(#"{"version":1,"id":1,"type":"status","permissions":["speaker"]}"#))
        guard case .error(let error) = try client.readReply().reply else {
            Issue.record("no error")
            return
        }
        #expect(error.code == .unknownPermission)
        // Same connection, fifty requests in one write.
        var batch: [UInt8] = []
        for id in 1...50 {
            let request: Request = id % 5 == 0 ? .status(StatusQuery(permissions: [.camera])) : .hello
            batch += MessageCodec.encode(RequestEnvelope(id: Int64(id), request: request)) + [0x0a]
        }
        try client.writeRaw(batch)
        for id in 1...50 {
            let reply = try client.readReply()
            #expect(reply.id == Int64(id))
            #expect(reply.reply.type == (id % 5 == 0 ? "status" : "hello"))
        }
    }

    @Test func garbageFloodsDoNotStopTheDaemon() throws {
        let daemon = try RunningDaemon()
        var generator = SystemRandomNumberGenerator()
        for round in 0..<20 {
            let client = try daemon.client(timeout: .seconds(5))
            var bytes = (0..<(1000 * (round + 1))).map { _ in UInt8.random(in: 0...255, using: &generator) }
            bytes.append(0x0a)
            try? client.writeRaw(bytes)
            _ = try? client.readReply()
        }
        #expect(daemon.process.isRunning)
        #expect(try daemon.client().hello().server.hasPrefix("devaccessd"))
        #expect(daemon.stop() == 0)
    }
}
