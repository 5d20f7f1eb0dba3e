import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// `location`: the position at the caller's grant. The level comes from the
/// ledger and the policy on the engine's queue, for the uid the kernel named; a level
/// finer than the grant is refused (and audited), never quietly coarsened.
extension BrokerService {
    func location(_ query: LocationQuery, id: Int64, peer: Peer) async -> Reply {
        let subject = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        guard let locations else {
            return .error(ProtocolError(.unavailable, context: "location",
                                        reason: "this devaccessd serves no location (it was started with --no-location)"))
        }
        let held: LocationAccuracy
        switch await servedLevel(query, subject: subject, id: id, peer: peer) {
        case .success(let level): held = level
        case .failure(let failure): return failure.reply
        }
        switch LocationPlan.level(asked: query.accuracy, held: held, subject: subject) {
        case .refused(let reason):
            return refuse("location", id: id, peer: peer, subject: subject, reason: reason)
        case .serve(let level):
            return await serve(query, at: level, held: held, from: locations, subject: subject, id: id, peer: peer)
        }
    }

    /// The position at `level`, looked up again before it goes out when it waited for
    /// gpsd's first fix: a grant revoked, lowered or switched off meanwhile must hold.
    private func serve(_ query: LocationQuery, at planned: LocationAccuracy, held: LocationAccuracy,
                       from locations: LocationServing, subject: Principal, id: Int64, peer: Peer) async -> Reply {
        var (level, granted) = (planned, held)
        var fix: LocationFix, waited: Bool
        switch await locations.fix(at: level, wait: .milliseconds(query.waitMilliseconds)) {
        case .unavailable(let problem): return .error(ProtocolError(.unavailable, context: "location", reason: problem))
        case .served(let first, let didWait): (fix, waited) = (first, didWait)
        }
        if waited {
            switch await servedLevel(query, subject: subject, id: id, peer: peer) {
            case .failure(let failure): return failure.reply
            case .success(let now):
                granted = now
                if let lowered = LocationPlan.lowered(serving: level, heldNow: now) {
                    level = lowered
                    guard case .served(let again, _) = await locations.fix(at: lowered, wait: .zero) else {
                        return .error(ProtocolError(.unavailable, context: "location", reason: locations.source.problem()))
                    }
                    fix = again
                }
            }
        }
        guard let document = LocationDocument(fix, granted: granted) else {
            return .error(ProtocolError(.unavailable, context: "location", reason: "the fix has no position"))
        }
        log.info("location served", ["uid": String(peer.uid), "pid": String(peer.pid),
                                     "program": peer.program ?? "-", "accuracy": level.rawValue])
        do throws(InterfaceError) {
            return .result(OperationResult(operation: "location", document: try Self.json(document)))
        } catch {
            return .error(error.protocolError)
        }
    }

    /// The subject's level, or the reply that ends the request: a refusal (audited) when
    /// it has none, an error when the engine cannot say.
    func grantedLocation(_ subject: Principal, id: Int64, peer: Peer) async -> Result<LocationAccuracy, ReplyFailure> {
        let granted: LocationAccuracy?
        do throws(InterfaceError) {
            granted = try await QueuedEngine(enforcement: enforcement).run("location") {
                (engine) throws(EnforcementError) -> (LocationAccuracy?, EnforcementReport) in
                (try engine.locationAccuracy(for: subject), EnforcementReport())
            }
        } catch {
            return .failure(ReplyFailure(.error(error.protocolError)))
        }
        guard let granted else {
            return .failure(ReplyFailure(refuse("location", id: id, peer: peer, subject: subject,
                                                reason: Self.noLocationGrant(subject))))
        }
        return .success(granted)
    }

    static func noLocationGrant(_ subject: Principal) -> String {
        LocationPlan.noGrant(subject)
    }

    /// The gpsd-compatible endpoint's lookup for a client the kernel says is `uid`: the
    /// user's level, that of each of their live runs given location, and their strict runs,
    /// ended ones too: a leftover process keeps an ended strict run's group id, and is
    /// judged as that run (given nothing now), as on devaccessd's socket.
    func locationCheck(uid: UInt32, peer address: TCPAddress) async -> GpsdCompatibleServer.UserLocation {
        var location = await levelsCheck(uid: uid, peer: address)
        let strict: [Run]
        do throws(LedgerError) {
            strict = try ledger.runs(uid: uid, includeEnded: true).filter(\.strict)
        } catch {
            // Not knowing which runs are strict must not serve one at its user's level.
            return GpsdCompatibleServer.UserLocation(
                user: .refused("cannot tell whether uid \(uid)'s runs may know the location: \(error.description)"))
        }
        location.strictRuns = Dictionary(strict.map { ($0.gid, RunScope($0)) }) { first, _ in first }
        return location
    }

    private func levelsCheck(uid: UInt32, peer address: TCPAddress) async -> GpsdCompatibleServer.UserLocation {
        let subject = Principal(uid: uid, name: UserDatabase.userName(uid) ?? String(uid))
        var runs: [UInt32: LocationAccuracy] = [:]
        do throws(InterfaceError) {
            runs = try await QueuedEngine(enforcement: enforcement).run("location") {
                (engine) throws(EnforcementError) -> ([UInt32: LocationAccuracy], EnforcementReport) in
                (try engine.runLocationAccuracies(for: subject), EnforcementReport())
            }
        } catch {
            return GpsdCompatibleServer.UserLocation(
                user: .refused("cannot tell whether \(subject.name) may know the location: \(error.protocolError.reason)"))
        }
        if !runs.isEmpty {
            // A refusal is not audited here: the runs' connections are served, and this is
            // looked up every few seconds while they stay. The endpoint reports each new
            // connection it refuses instead (refusedUnaudited).
            do throws(InterfaceError) {
                let level = try await userLevel(subject)
                return GpsdCompatibleServer.UserLocation(
                    user: level.map { .allowed($0) } ?? .refused(Self.noLocationGrant(subject)), runs: runs)
            } catch {
                return GpsdCompatibleServer.UserLocation(
                    user: .refused("cannot tell whether \(subject.name) may know the location: \(error.protocolError.reason)"))
            }
        }
        // TCP gives no pid: the audit names the connection instead.
        var peer = Peer(pid: 0, uid: uid, gid: 0, groups: [])
        peer.programProblem = "a TCP client of the gpsd endpoint from \(address)"
        switch await grantedLocation(subject, id: 0, peer: peer) {
        case .success(let level):
            return GpsdCompatibleServer.UserLocation(user: .allowed(level), runs: runs)
        case .failure(let failure):
            if case .error(let error) = failure.reply, error.code != .permissionDenied {
                return GpsdCompatibleServer.UserLocation(
                    user: .refused("cannot tell whether \(subject.name) may know the location: \(error.reason)"))
            }
            return GpsdCompatibleServer.UserLocation(user: .refused(Self.noLocationGrant(subject)))
        }
    }

    /// The subject's own level, nil when none; throws when the engine cannot say.
    private func userLevel(_ subject: Principal) async throws(InterfaceError) -> LocationAccuracy? {
        return try await QueuedEngine(enforcement: enforcement).run("location") {
            (engine) throws(EnforcementError) -> (LocationAccuracy?, EnforcementReport) in
            (try engine.locationAccuracy(for: subject), EnforcementReport())
        }
    }

    /// The gpsd endpoint on loopback `port` (IPv4 and IPv6; an address that cannot be bound,
    /// such as ::1 with IPv6 off, is left out and logged). nil when this broker serves no
    /// location or no address could be bound.
    public func gpsdEndpoint(port: UInt16, limits: GpsdCompatibleServer.Limits = GpsdCompatibleServer.Limits())
        -> GpsdCompatibleServer?
    {
        guard let locations else { return nil }
        var listeners: [TCPListener] = []
        for family in [AF_INET, AF_INET6] {
            do {
                listeners.append(try TCPListener(.loopback(family: family, port: port)))
            } catch {
                log.warning("gpsd endpoint: cannot listen", ["address": TCPAddress.loopback(family: family, port: port)
                    .description, "error": error.description])
            }
        }
        guard !listeners.isEmpty else { return nil }
        do {
            return try GpsdCompatibleServer(listeners: listeners, serving: locations, log: log, limits: limits,
                                            refusedUnaudited: { [self] uid, address, reason in
                // Each refused connection, through the refusal throttle like every other, off
                // the endpoint's loop (the ledger write syncs to disk).
                Task {
                    var peer = Peer(pid: 0, uid: uid, gid: 0, groups: [])
                    peer.programProblem = "a TCP client of the gpsd endpoint from \(address), outside the user's runs"
                    let subject = Principal(uid: uid, name: UserDatabase.userName(uid) ?? String(uid))
                    _ = refuse("location", id: 0, peer: peer, subject: subject, reason: reason)
                }
            }) { [self] uid, address in
                await locationCheck(uid: uid, peer: address)
            }
        } catch {
            log.error("gpsd endpoint: cannot start", ["error": error.description])
            return nil
        }
    }
}

/// A reply that ends a request early, as an error value.
struct ReplyFailure: Error {
    var reply: Reply
    init(_ reply: Reply) { self.reply = reply }
}
