import DevAccessCore

/// Every operation devaccess offers that decides, records, or reads decisions, in one
/// place (USBGuard's `Interface`). Two implementations:
/// - `BrokerInterface` (in the DevAccess library, SPI for the CLI, over its
///   `BrokerSession`) speaks the protocol to devaccessd, the one writer of the ledger and
///   the ACLs while it runs; the CLI uses it for everyone, root included.
/// - `EngineService` (DevAccessEngine) runs the enforcement engine itself. devaccessd serves its
///   connections with it (one per request, for the peer the kernel named), and root's
///   `--offline` repair mode uses it in-process under the engine lock the daemon holds.
///
/// `request`, `open` and `run` need devaccessd (it asks consent on the login terminal, opens
/// the node, starts and tracks the program): the engine in-process answers them `.unreachable`.
public protocol DevAccessInterface: Sendable {
    /// Record an allow or deny for a user and apply it to the nodes (admin).
    func decide(_ order: DecisionOrder) async throws(InterfaceError) -> DecisionDocument
    /// End a user's allow grants (admin; anyone for their own).
    func revoke(_ order: RevokeOrder) async throws(InterfaceError) -> RevokeDocument
    /// Forget a user's decisions (admin).
    func reset(_ order: ResetOrder) async throws(InterfaceError) -> ResetDocument
    /// Decisions in the ledger (admin: anyone's; others: their own).
    func list(_ query: ListQuery) async throws(InterfaceError) -> GrantListDocument
    /// Apply the whole ledger to the machine (admin).
    func reconcile() async throws(InterfaceError) -> EnforcementDocument
    /// Take back a pending request (its requester; admin: anyone's).
    func withdraw(_ action: PendingAction) async throws(InterfaceError) -> WithdrawDocument

    // The approval queue (policy auth_admin).
    /// The requests waiting for an administrator (admin: everyone's; others: their own).
    func pending() async throws(InterfaceError) -> PendingListReply
    /// Grant what a pending request asks for, for the term chosen or asked (admin).
    func approve(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply
    /// Decline a pending request, or with `deny` record a denial of what it asks for (admin).
    func reject(_ action: PendingAction) async throws(InterfaceError) -> ResolvedReply
    /// Check the audit trail's hash chain, and an archive file's with its link to the
    /// ledger (admin; an archive outside the state directory: root).
    func verifyAudit(_ query: AuditVerifyQuery) async throws(InterfaceError) -> AuditVerifyDocument
    /// Move audit events older than a time into an archive file (admin; choosing the file: root).
    func archiveAudit(_ order: AuditArchiveOrder) async throws(InterfaceError) -> AuditArchiveDocument
    /// Read the audit trail: a page of filtered events, their summary, or one event (admin).
    func auditReport(_ query: AuditReportQuery) async throws(InterfaceError) -> AuditReportDocument
    /// Turn a permission off for everyone, or back on (admin).
    func setSwitch(_ order: SwitchOrder) async throws(InterfaceError) -> SwitchesDocument
    /// The privacy switches (anyone).
    func switches() async throws(InterfaceError) -> SwitchesDocument
    /// The machine's position at the caller's granted accuracy (devaccessd only: it is
    /// gpsd's one client).
    func location(_ query: LocationQuery) async throws(InterfaceError) -> LocationDocument

    // MARK: What needs devaccessd: request, open, run
    /// Ask for permissions for the caller; `conversation` answers what devaccessd asks on
    /// the connection. Returns when each permission is decided (or queued, without `wait`).
    func request(_ request: AccessRequest,
                 conversation: any RequestConversation) async throws(InterfaceError) -> DecisionReply
    /// A node of a device the caller holds a grant for, opened by devaccessd and handed over.
    func open(_ order: OpenOrder) async throws(InterfaceError) -> OpenedNode
    /// Have devaccessd start a program as the caller with the permissions decided for it,
    /// its standard streams `streams`; returns when the program ended or was not run.
    func run(_ order: RunOrder, streams: StandardStreams,
             conversation: any RunConversation) async throws(InterfaceError) -> RunOutcome

    // MARK: Reads: status, who, status updates
    /// The statuses of some permissions (nil: all) for the caller's user, or for `query.user`
    /// (root and administrators: anyone's; others: their own only).
    func status(_ query: StatusQuery) async throws(InterfaceError) -> StatusReply
    /// The processes that hold the device nodes open now, as far as the caller's own
    /// credentials let it inspect processes (anyone; the engine in the caller's process only:
    /// devaccessd has no `who`).
    func who(_ query: WhoQuery) async throws(InterfaceError) -> WhoDocument
    /// The caller's own statuses as they change: first each as it is now, then each change
    /// (devaccessd only: it sees the changes; without it the stream fails `.unreachable`).
    func statusUpdates(_ query: SubscribeQuery) -> StatusUpdateStream
}

/// Why an operation did not happen; each case maps to one documented exit code.
public enum InterfaceError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The caller may not do this (exit 77); the broker audits it as `refused`.
    case refused(operation: String, reason: String)
    /// A user, device, pending request or term that does not exist or cannot be (exit 64).
    case badArgument(String)
    /// No pending request with that id, or it is resolved already (exit 1).
    case notFound(String)
    /// Another process holds the ledger or the engine lock (exit 75).
    case busy(String)
    /// The ledger cannot be used (exit 74).
    case ledgerUnusable(String)
    /// devaccessd cannot be reached (exit 69).
    case unreachable(String)
    /// devaccessd runs but turned the connection away (too many), or did not answer within a
    /// conversation's limit; try again (exit 69).
    case brokerBusy(String)
    /// What was asked for is not there now (gpsd down, no fix) (exit 6).
    case unavailable(String)
    /// Anything else (exit 1).
    case failed(String)

    public var description: String {
        switch self {
        case .refused(_, let reason): return reason
        case .badArgument(let text), .notFound(let text), .busy(let text), .ledgerUnusable(let text),
             .unreachable(let text), .brokerBusy(let text), .unavailable(let text), .failed(let text):
            return text
        }
    }
}
