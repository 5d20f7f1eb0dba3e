import DevAccessCore
import DevAccessProtocol
import FuzzSupport
import DevAccessInterface

/// What a local client can send devaccessd: bytes, framed into lines as the broker frames
/// them, each decoded as a request. A request that decodes must encode and decode back to
/// itself (the client library and the broker share the codec). The same bytes are also
/// decoded as replies, which the client library reads from the broker.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzProtocol(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var framer = LineFramer(maxLineLength: 64 * 1024)
    framer.append(fuzzInput(data, size) + [0x0a])
    while case .line(let line) = framer.next() {
        if let request = try? MessageCodec.decodeRequest(line) {
            let again = try? MessageCodec.decodeRequest(MessageCodec.encode(request))
            fuzzCheck(again == request, "request does not survive encode/decode: \(request) -> \(String(describing: again))")
        }
        if let reply = try? MessageCodec.decodeReply(line) {
            let again = try? MessageCodec.decodeReply(MessageCodec.encode(reply))
            fuzzCheck(again == reply, "reply does not survive encode/decode: \(reply) -> \(String(describing: again))")
        }
        _ = try? JSONParser.parse(line)
    }
    return 0
}

runFuzzer(fuzzProtocol)
