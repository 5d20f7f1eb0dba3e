import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessProtocol

/// `DevAccessInterface` over devaccessd's socket: each operation is one version 3
/// request, answered by a `result` whose document is decoded into its type.
public struct BrokerInterface: DevAccessInterface {
    public let socketPath: String
    public let timeout: Duration

    public init(socketPath: String = BrokerClient.configuredSocketPath, timeout: Duration = .seconds(60)) {
        self.socketPath = socketPath
        self.timeout = timeout
    }

    public func decide(_ order: DecisionOrder) async throws(InterfaceError) -> DecisionDocument {
        try perform(.decide(order))
    }

    public func revoke(_ order: RevokeOrder) async throws(InterfaceError) -> RevokeDocument {
        try perform(.revoke(order))
    }

    public func reset(_ order: ResetOrder) async throws(InterfaceError) -> ResetDocument {
        try perform(.reset(order))
    }

    public func list(_ query: ListQuery) async throws(InterfaceError) -> GrantListDocument {
        try perform(.list(query))
    }

    public func reconcile() async throws(InterfaceError) -> EnforcementDocument {
        try perform(.reconcile)
    }

    public func withdraw(_ action: PendingAction) async throws(InterfaceError) -> WithdrawDocument {
        try perform(.withdraw(action))
    }

    public func verifyAudit(_ query: AuditVerifyQuery) async throws(InterfaceError) -> AuditVerifyDocument {
        try perform(.auditVerify(query))
    }

    public func archiveAudit(_ order: AuditArchiveOrder) async throws(InterfaceError) -> AuditArchiveDocument {
        try perform(.auditArchive(order))
    }

    public func auditReport(_ query: AuditReportQuery) async throws(InterfaceError) -> AuditReportDocument {
        try perform(.auditReport(query))
    }

    public func setSwitch(_ order: SwitchOrder) async throws(InterfaceError) -> SwitchesDocument {
        try perform(.setSwitch(order))
    }

    public func switches() async throws(InterfaceError) -> SwitchesDocument {
        try perform(.switches)
    }

    public func location(_ query: LocationQuery) async throws(InterfaceError) -> LocationDocument {
        try perform(.location(query))
    }

    private func perform<Document: Decodable>(_ request: Request) throws(InterfaceError) -> Document {
        let result: OperationResult
        do {
            let client = try BrokerClient(socketPath: socketPath, timeout: timeout)
            result = try client.perform(request)
        } catch {
            throw InterfaceError(error)
        }
        do {
            return try JSONDecoder().decode(Document.self, from: Data(JSONWriter.bytes(result.document)))
        } catch {
            throw .failed("devaccessd's answer to '\(request.type)' is not what this devaccess expects (\(error)); "
                + "is devaccessd the same version?")
        }
    }
}

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
