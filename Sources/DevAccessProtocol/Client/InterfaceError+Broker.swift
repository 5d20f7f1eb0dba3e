import DevAccessInterface

extension InterfaceError {
    /// A broker call's failure: the broker's own refusal keeps its sentence and code.
    public init(_ error: BrokerClientError) {
        switch error {
        case .unreachable, .timedOut, .closed:
            self = .unreachable(error.description)
        case .rejected(let frame):
            switch frame.code {
            case .permissionDenied: self = .refused(operation: frame.context, reason: frame.reason)
            case .badArgument, .noSuchUser, .unknownPermission: self = .badArgument(frame.reason)
            case .noSuchRequest: self = .notFound(frame.reason)
            case .busy: self = .brokerBusy("devaccessd is busy: \(frame.reason)")
            case .ledgerBusy: self = .busy(frame.reason)
            case .ledgerUnusable: self = .ledgerUnusable(frame.reason)
            case .unavailable: self = .unavailable(frame.reason)
            case .unknownType, .unsupportedVersion:
                self = .failed("\(frame.reason); devaccessd is older than this devaccess, restart it after the upgrade")
            default: self = .failed(frame.reason)
            }
        case .badReply, .io:
            self = .failed(error.description)
        }
    }

    /// How the broker says it on the wire (the client maps it back with `init(_:)`).
    public var protocolError: ProtocolError {
        switch self {
        case .refused(let operation, let reason): return ProtocolError(.permissionDenied, context: operation, reason: reason)
        case .badArgument(let text): return ProtocolError(.badArgument, context: "request", reason: text)
        case .notFound(let text): return ProtocolError(.noSuchRequest, context: "$.pending", reason: text)
        case .busy(let text): return ProtocolError(.ledgerBusy, context: "ledger", reason: text)
        case .ledgerUnusable(let text): return ProtocolError(.ledgerUnusable, context: "ledger", reason: text)
        case .unavailable(let text): return ProtocolError(.unavailable, context: "location", reason: text)
        case .unreachable(let text), .brokerBusy(let text), .failed(let text):
            return ProtocolError(.internal, context: "broker", reason: text)
        }
    }
}
