import DevAccessInterface
import DevAccessProtocol

extension InterfaceError {
    /// A conversation with devaccessd that failed (`devaccess request` and `run`), as those
    /// commands report it: the client's own sentence ("devaccessd refused (permission-denied):
    /// ..."), in the case that gives the exit code. Unlike `init(_:)` (the operations'
    /// mapping), a refusal keeps the client's wording, and only an unknown pending request
    /// or permission is a bad argument.
    @_spi(CLI) public init(conversation error: BrokerClientError) {
        switch error {
        case .unreachable, .timedOut, .closed:
            self = .unreachable(error.description)
        case .rejected(let frame) where frame.code == .busy:
            self = .brokerBusy(error.description)
        case .rejected(let frame) where frame.code == .permissionDenied:
            self = .refused(operation: frame.context, reason: error.description)
        case .rejected(let frame) where frame.code == .noSuchRequest || frame.code == .unknownPermission:
            self = .badArgument(frame.reason)
        case .rejected, .badReply, .io:
            self = .failed(error.description)
        }
    }
}
