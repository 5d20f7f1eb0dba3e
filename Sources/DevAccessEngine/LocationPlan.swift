import DevAccessCore
import DevAccessLedger

/// `location`, decided: the level a position is served at, from what was asked and the
/// level the caller holds (its grant capped by policy, or its strict run's own). A level
/// finer than the one held is refused, never quietly coarsened.
public enum LocationPlan {
    /// What `location` comes to.
    public enum Outcome: Sendable, Hashable {
        case serve(LocationAccuracy)
        /// The words of the audited refusal.
        case refused(String)
    }

    /// The level to serve at, or the refusal.
    public static func level(asked: LocationAccuracy?, held: LocationAccuracy, subject: Principal) -> Outcome {
        guard let asked else { return .serve(held) }
        guard asked <= held else {
            return .refused("\(subject.name)'s location grant is at \(held) accuracy (\(held.approximately)), not "
                + "\(asked); ask for more with 'devaccess request location --accuracy \(asked)'")
        }
        return .serve(asked)
    }

    /// After waiting for gpsd's first fix: the level held now, when a revoke, a lowered grant
    /// or a switch made it coarser than `serving` while the request waited; nil: serve as planned.
    public static func lowered(serving: LocationAccuracy, heldNow: LocationAccuracy) -> LocationAccuracy? {
        heldNow < serving ? heldNow : nil
    }

    /// The refusal for a caller who holds no location level.
    public static func noGrant(_ subject: Principal) -> String {
        "\(subject.name) may not know this computer's location: no location grant (ask with "
            + "'devaccess request location'; 'devaccess status location' says why)"
    }
}
