import Foundation
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface

/// `location` (version 6): the position at the caller's grant. The level comes from the
/// ledger and the policy on the engine's queue, for the uid the kernel named; a level
/// finer than the grant is refused (and audited), never quietly coarsened.
extension BrokerService {
    func location(_ query: LocationQuery, id: Int64, peer: Peer) async -> Reply {
        let subject = Principal(uid: peer.uid, name: UserDatabase.userName(peer.uid) ?? String(peer.uid))
        guard let locations else {
            return .error(ProtocolError(.unavailable, context: "location",
                                        reason: "this devaccessd serves no location (it was started with --no-location)"))
        }
        guard let enforcement else {
            return .error(ProtocolError(.internal, context: "location", reason: "this broker runs without a ledger"))
        }
        let granted: LocationAccuracy?
        do throws(InterfaceError) {
            granted = try await QueuedEngine(enforcement: enforcement).run("location") {
                (engine) throws(EnforcementError) -> (LocationAccuracy?, EnforcementReport) in
                (try engine.locationAccuracy(for: subject), EnforcementReport())
            }
        } catch {
            return .error(error.protocolError)
        }
        guard let granted else {
            return refuse("location", id: id, peer: peer, subject: subject,
                          reason: "\(subject.name) may not know this computer's location: no location grant "
                              + "(ask with 'devaccess request location'; 'devaccess status location' says why)")
        }
        if let asked = query.accuracy, asked > granted {
            return refuse("location", id: id, peer: peer, subject: subject,
                          reason: "\(subject.name)'s location grant is at \(granted) accuracy (\(granted.approximately)), "
                              + "not \(asked); ask for more with 'devaccess request location --accuracy \(asked)'")
        }
        let level = query.accuracy ?? granted
        switch await locations.fix(at: level, wait: .milliseconds(query.waitMilliseconds)) {
        case .unavailable(let problem):
            return .error(ProtocolError(.unavailable, context: "location", reason: problem))
        case .served(let fix):
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
    }
}
