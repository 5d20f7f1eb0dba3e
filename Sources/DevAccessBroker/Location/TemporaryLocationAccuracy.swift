// TEMPORARY until the accuracy branch lands: replaced by Enforcer.locationAccuracy(for:).
import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement
extension Enforcer {
    func locationAccuracy(for subject: Principal) throws(EnforcementError) -> LocationAccuracy? { nil }
}
