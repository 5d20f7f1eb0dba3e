import DevAccessCore
import DevAccessInterface
import DevAccessProtocol

/// `DevAccessInterface` over devaccessd's socket: each operation is one
/// request, answered by a `result` whose document is decoded into its type. SPI for the
/// CLI's commands (see ``BrokerSession``); the engine (`EngineService`)
/// is the other implementation, for `--offline`.
@_spi(CLI) public struct BrokerInterface: DevAccessInterface {
    public let socketPath: String
    public let timeout: Duration

    public init(socketPath: String, timeout: Duration = .seconds(60)) {
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

    public func pending() async throws(InterfaceError) -> PendingListReply {
        do {
            return try BrokerSession(socketPath: socketPath, timeout: timeout).pending()
        } catch {
            throw InterfaceError(error)
        }
    }

    public func approve(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply {
        try resolve(action, approve: true)
    }

    public func reject(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply {
        try resolve(action, approve: false)
    }

    /// `approve` and `reject` are their own wire messages, answered `resolved`.
    private func resolve(_ action: PendingAction, approve: Bool) throws(InterfaceError) -> ResolvedReply {
        do {
            return try BrokerSession(socketPath: socketPath, timeout: timeout).resolve(
                action.pending, approve: approve, reason: action.reason, scope: action.scope, deny: action.deny)
        } catch {
            throw InterfaceError(error)
        }
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
        do {
            return try DeviceAccess(socketPath: socketPath, timeout: timeout).locationDocument(query)
        } catch {
            throw InterfaceError(error)
        }
    }

    // MARK: What devaccessd alone does: request, open, run

    /// The library's request loop (`DeviceAccess.converse`), `conversation` answering.
    public func request(_ request: AccessRequest,
                        conversation: any RequestConversation) async throws(InterfaceError) -> DecisionReply {
        var handler = ContractConversation(conversation: conversation)
        do {
            return try DeviceAccess(socketPath: socketPath, timeout: timeout).request(request, conversation: &handler)
        } catch let error as InterfaceError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    public func open(_ order: OpenOrder) async throws(InterfaceError) -> OpenedNode {
        do {
            let (reply, descriptor) = try BrokerSession(socketPath: socketPath, timeout: timeout).open(order)
            return OpenedNode(reply, owning: descriptor)
        } catch {
            throw InterfaceError(error)
        }
    }

    public func run(_ order: RunOrder, streams: StandardStreams,
                    conversation: any RunConversation) async throws(InterfaceError) -> RunOutcome {
        do {
            let session = try BrokerSession(socketPath: socketPath, timeout: timeout)
            let id = try session.startRun(order, descriptors: [streams.input, streams.output, streams.error])
            return try BrokerRun(session: session, id: id, order: order, conversation: conversation).follow()
        } catch let error as BrokerClientError {
            throw InterfaceError(conversation: error)
        } catch let error as InterfaceError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    // MARK: Reads

    public func status(_ query: StatusQuery) async throws(InterfaceError) -> StatusReply {
        do {
            return try await DeviceAccess(socketPath: socketPath, timeout: timeout).statusReply(query)
        } catch {
            throw InterfaceError(error)
        }
    }

    /// devaccessd has no `who` (it would inspect every process as root, for any caller), and
    /// this library reads no process table itself: `devaccess who` reads it in its own process.
    public func who(_ query: WhoQuery) async throws(InterfaceError) -> WhoDocument {
        throw .failed("devaccessd has no 'who' operation; 'devaccess who' reads who holds the nodes in its own "
            + "process, with its own credentials")
    }

    /// devaccessd's `subscribe`, kept up across its restarts (`DeviceAccess.statusUpdates`).
    public func statusUpdates(_ query: SubscribeQuery) -> StatusUpdateStream {
        StatusSubscriber(socketPath: socketPath, timeout: timeout, permissions: query.permissions).updates()
    }

    private func perform<Document: Decodable>(_ request: Request) throws(InterfaceError) -> Document {
        do {
            return try BrokerSession(socketPath: socketPath, timeout: timeout).document(request)
        } catch {
            throw InterfaceError(error)
        }
    }
}
