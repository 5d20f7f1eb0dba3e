import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// The operations that decide or record (decide, revoke, reset, list, reconcile, withdraw,
/// audit-verify, audit-archive): `EngineService` for the peer the kernel named, on the broker's one
/// enforcement queue. Refusals are audited like every other refusal.
extension BrokerService {
    func administer(_ request: Request, id: Int64, peer: Peer) async -> Reply {
        let caller = caller(of: peer)
        switch request {
        case .revoke, .reset, .withdraw:
            if let refusal = overChangeBudget(request.type, id: id, peer: peer, caller: caller,
                                              subject: Self.subject(of: request)) {
                return refusal
            }
        default:
            break
        }
        let service = EngineService(caller: caller, runner: QueuedEngine(enforcement: enforcement))
        do throws(InterfaceError) {
            let document: any Encodable & Sendable
            switch request {
            case .decide(let order): document = try await service.decide(order)
            case .revoke(let order): document = try await service.revoke(order)
            case .reset(let order): document = try await service.reset(order)
            case .list(let query): document = try await service.list(query)
            case .reconcile: document = try await service.reconcile()
            case .withdraw(let action): document = try await service.withdraw(action)
            case .auditVerify(let query): document = try await service.verifyAudit(query)
            case .auditArchive(let order): document = try await service.archiveAudit(order)
            case .auditReport(let query): document = try await service.auditReport(query)
            case .setSwitch(let order): document = try await service.setSwitch(order)
            case .switches: document = try await service.switches()
            default:
                return .error(ProtocolError(.internal, context: "$.type", reason: "'\(request.type)' is not an operation"))
            }
            log.info("served", ["operation": request.type, "uid": String(peer.uid), "pid": String(peer.pid)])
            switch request {
            case .revoke, .reset, .withdraw: chargeChange(peer, caller: caller)
            default: break
            }
            return .result(OperationResult(operation: request.type, document: try Self.json(document)))
        } catch {
            if case .refused(let operation, let reason) = error {
                return refuse(operation, id: id, peer: peer, subject: Self.subject(of: request), reason: reason)
            }
            if case .ledgerUnusable = error {
                log.error("operation failed", ["operation": request.type, "error": error.description])
            }
            return .error(error.protocolError)
        }
    }

    /// The user a request is about, for the audit of a refusal (resolved when it exists).
    static func subject(of request: Request) -> Principal? {
        let text: String?
        switch request {
        case .decide(let order): text = order.user
        case .revoke(let order): text = order.user
        case .reset(let order): text = order.user
        case .list(let query): text = query.user
        case .auditReport(let query): text = query.user
        default: text = nil
        }
        guard let text, let identity = try? UserDatabase.identity(for: text) else { return nil }
        return Principal(uid: identity.uid, name: identity.name)
    }

    /// A result document as a JSON value for the `result` reply, encoded once: the tree
    /// `--json`'s JSONEncoder prints, built without the bytes.
    static func json(_ document: some Encodable) throws(InterfaceError) -> JSONValue {
        do {
            return try JSONValueEncoder.encode(document)
        } catch {
            throw .failed("cannot encode the result: \(error)")
        }
    }
}

/// `EngineRunner` on the daemon's enforcement queue (shared with hotplug, expiry and the
/// periodic runs): never two engine runs at once.
struct QueuedEngine: EngineRunner {
    let enforcement: LiveEnforcer

    func run<R: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport)
    ) async throws(InterfaceError) -> R {
        do {
            return try await enforcement.perform(operation, body)
        } catch {
            switch error {
            case .engine(let engineError): throw InterfaceError(engineError)
            case .unavailable(let why): throw .failed("enforcement is not available: \(why)")
            }
        }
    }
}
