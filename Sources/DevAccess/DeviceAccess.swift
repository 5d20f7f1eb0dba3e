import FoundationEssentials
import Glibc
@_exported import DevAccessCore
import DevAccessProtocol
import DevAccessInterface
import DevAccessSystem

/// Access to the camera, the microphone and the location through devaccessd.
///
/// ```swift
/// let access = DeviceAccess()
/// let results = try await access.request([.camera, .microphone], reason: "video call",
///                                        required: [.camera], term: .once)
/// if results[.microphone]?.isAllowed == true { /* with sound */ }
/// ```
///
/// Every call opens a connection of its own to devaccessd, which identifies the caller
/// from the kernel (`SO_PEERCRED`, `/proc`): nothing the program says about itself
/// counts. Calls that wait (a prompt, an administrator) run on a thread of their own and
/// stop at once when their task is cancelled.
public struct DeviceAccess: Sendable {
    /// devaccessd's socket.
    public let socketPath: String
    /// How long to wait for devaccessd to accept and answer a call that does not wait for
    /// a person.
    public var timeout: Duration

    /// `socketPath`: `$DEVACCESS_SOCKET` when set and not empty, else
    /// `/run/devaccess/broker.sock`.
    public init(socketPath: String = DeviceAccess.configuredSocketPath, timeout: Duration = .seconds(10)) {
        self.socketPath = socketPath
        self.timeout = timeout
    }

    // MARK: Status

    /// The status of one permission for the calling user: whether they can use it now,
    /// its devices, and the reasons.
    public func status(_ permission: Permission) async throws(DeviceAccessError) -> PermissionStatus {
        let statuses = try await status([permission])
        guard let status = statuses.first(where: { $0.permission == permission }) else {
            throw .protocol("the status reply has no entry for \(permission)")
        }
        return status
    }

    /// The statuses of `permissions` (all that devaccessd knows when nil), in its order.
    public func status(_ permissions: [Permission]? = nil) async throws(DeviceAccessError) -> [PermissionStatus] {
        try await statusReport(permissions).permissions
    }

    /// The statuses of `permissions` (nil: all) for the caller's user, or for `user` (a
    /// name or a decimal uid: root and devaccessd's admin group only, else
    /// `.notPermitted`), with whose statuses they are.
    public func statusReport(_ permissions: [Permission]? = nil,
                             user: String? = nil) async throws(DeviceAccessError) -> StatusReport {
        let socketPath = self.socketPath, timeout = self.timeout
        let reply = try await offload { cancellation throws(DeviceAccessError) in
            try Self.call(socketPath, timeout: timeout, cancellation: cancellation) { session throws(BrokerClientError) in
                try session.status(permissions, user: user)
            }
        }
        return StatusReport(user: reply.user, uid: reply.uid, permissions: reply.permissions)
    }

    /// `status`'s reply as devaccessd sent it, its failure as the protocol states it
    /// (`BrokerInterface.status`); off the cooperative pool, cancellable.
    func statusReply(_ query: StatusQuery) async throws(BrokerClientError) -> StatusReply {
        let socketPath = self.socketPath, timeout = self.timeout
        let cancellation = CallCancellation()
        let outcome = await withTaskCancellationHandler {
            await DetachedThread.run(name: "DevAccess call") { () -> Result<StatusReply, BrokerClientError> in
                Result { () throws(BrokerClientError) in
                    try Self.exchange(socketPath, timeout: timeout, cancellation: cancellation) {
                        session throws(BrokerClientError) in
                        try session.status(query.permissions, user: query.user)
                    }
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
        return try outcome.get()
    }

    // MARK: Request

    /// Asks for `permissions` for this program, with a reason shown to whoever decides.
    ///
    /// devaccessd decides each permission by the machine's policy: at once (allowed,
    /// restricted), by a standing decision, by asking the user on their login terminal, by
    /// their password, or by queueing it for an administrator. This call returns when all
    /// are decided (with `waitForApproval`, after an administrator did).
    ///
    /// - Parameters:
    ///   - required: permissions the program cannot work without. If one of them ends
    ///     denied, restricted, unsupported or undecided, the call throws the error naming
    ///     it; the others (optional) only report their outcome.
    ///   - term: how long a grant made now holds; nil: the policy's `Keep=`, else `.once`.
    ///   - accuracy: with `.location`: the level asked for (nil: exact).
    ///   - waitForApproval: when an administrator must decide, wait for them (cancel the
    ///     task to stop waiting: the queued request is then withdrawn); false: return at
    ///     once with outcome `.pending`.
    /// - Returns: one result per permission, in the order asked.
    /// - Throws: ``DeviceAccessError`` for a required permission that was not allowed,
    ///   `.cancelled` when the task was cancelled, `.brokerUnavailable`, `.protocol`.
    public func request(_ permissions: [Permission], reason: String? = nil, required: Set<Permission> = [],
                        term: AccessTerm? = nil, accuracy: LocationAccuracy? = nil,
                        waitForApproval: Bool = true) async throws(DeviceAccessError) -> RequestResults {
        guard !permissions.isEmpty else { return RequestResults(results: []) }
        let order = AccessRequest(permissions: permissions, reason: reason, scope: term?.scope, wait: waitForApproval,
                                  accuracy: permissions.contains(.location) ? accuracy : nil)
        let socketPath = self.socketPath, timeout = self.timeout
        let decision = try await offload { cancellation throws(DeviceAccessError) in
            try UnattendedRequest(socketPath: socketPath, timeout: timeout, cancellation: cancellation).run(order)
        }
        let results = RequestResults(results: decision.results.map { result in
            PermissionResult(result, status: decision.permissions.first { $0.permission == result.permission })
        })
        for result in results where required.contains(result.permission) {
            if let failure = result.requiredFailure { throw failure }
        }
        return results
    }

    /// Asks for one permission; throws unless it is allowed (see
    /// ``request(_:reason:required:term:accuracy:waitForApproval:)``).
    @discardableResult
    public func request(_ permission: Permission, reason: String? = nil, term: AccessTerm? = nil,
                        accuracy: LocationAccuracy? = nil) async throws(DeviceAccessError) -> PermissionResult {
        let results = try await request([permission], reason: reason, required: [permission], term: term,
                                        accuracy: accuracy)
        guard let result = results[permission] else { throw .protocol("the decision has no result for \(permission)") }
        return result
    }

    // MARK: Location

    /// The machine's position at `accuracy` (nil: the level the user's grant allows),
    /// served by devaccessd from gpsd. The program never talks to gpsd itself.
    ///
    /// - Parameter wait: how long devaccessd waits for a first fix when gpsd has none.
    /// - Throws: `.denied(.location, …)` without a grant at that level (request one first),
    ///   `.unsupported(.location, …)` without gpsd, a receiver or a fix.
    public func location(accuracy: LocationAccuracy? = nil,
                         wait: Duration = .seconds(5)) async throws(DeviceAccessError) -> LocationReading {
        let milliseconds = min(max(wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000, 0),
                               LocationQuery.maxWait)
        let query = LocationQuery(accuracy: accuracy, waitMilliseconds: milliseconds)
        let access = self
        let document = try await offload { cancellation throws(DeviceAccessError) in
            do throws(BrokerClientError) {
                return try access.locationDocument(query, cancellation: cancellation)
            } catch {
                if cancellation.isCancelled { throw .cancelled }
                throw DeviceAccessError(error, permission: .location)
            }
        }
        return LocationReading(document)
    }

    /// `location`'s answer as devaccessd wrote it (`devaccess location --json`'s document),
    /// its failure as the protocol states it; blocks the calling thread. SPI: the CLI prints
    /// the document and maps the failure to its exit codes.
    @_spi(CLI) public func locationDocument(_ query: LocationQuery) throws(BrokerClientError) -> LocationDocument {
        try locationDocument(query, cancellation: CallCancellation())
    }

    func locationDocument(_ query: LocationQuery, cancellation: CallCancellation) throws(BrokerClientError) -> LocationDocument {
        // devaccessd waits up to `waitMilliseconds` for a fix: the reply may take that long on top.
        try Self.exchange(socketPath, timeout: timeout + .milliseconds(query.waitMilliseconds),
                          cancellation: cancellation) { session throws(BrokerClientError) in
            try session.document(.location(query), as: LocationDocument.self)
        }
    }

    // MARK: Plumbing

    /// One connection, one blocking exchange, with cancellation; `permission`: what the
    /// call is about (how a refusal is reported).
    static func call<Value>(_ socketPath: String, timeout: Duration, cancellation: CallCancellation,
                            permission: Permission? = nil,
                            _ body: (BrokerSession) throws(BrokerClientError) -> Value) throws(DeviceAccessError) -> Value {
        do throws(BrokerClientError) {
            return try exchange(socketPath, timeout: timeout, cancellation: cancellation, body)
        } catch {
            if cancellation.isCancelled { throw .cancelled }
            throw DeviceAccessError(error, permission: permission)
        }
    }

    /// The same, its failure as the protocol states it.
    static func exchange<Value>(_ socketPath: String, timeout: Duration, cancellation: CallCancellation,
                                _ body: (BrokerSession) throws(BrokerClientError) -> Value) throws(BrokerClientError) -> Value {
        let session = try BrokerSession(socketPath: socketPath, timeout: timeout, cancellation: cancellation)
        // Detached before the session (and its socket) goes: a late cancellation must not
        // shut down whatever gets the descriptor number next.
        defer { cancellation.detach() }
        return try withExtendedLifetime(session) { () throws(BrokerClientError) -> Value in try body(session) }
    }
}

/// Statuses and the user they are of, as devaccessd computed them.
public struct StatusReport: Sendable, Hashable {
    public var user: String
    public var uid: UInt32
    public var permissions: [PermissionStatus]
}
