import FoundationEssentials
import Glibc
import DevAccessLedger

/// What a long-running caller (the daemon) needs to schedule engine runs: when the next
/// grant runs out, and whether a run could change anything at all.
extension Enforcer {
    /// The earliest expiry among the standing decisions (allow or deny, every permission)
    /// and the switches turned off `--for` a while,
    /// nil when none has one. Grants already past their time are not here: they are what
    /// the next run ends (`Ledger.expiredUnrevoked`).
    public func nextExpiry() throws(EnforcementError) -> Date? {
        do {
            let now = clock()
            // A grant whose time ran out but that no run has ended yet is due now: it is no
            // longer among the standing grants, so the minimum below would miss it, and its
            // entry would stay until some other run came by.
            if let overdue = try ledger.expiredUnrevoked(now: now).compactMap(\.expires).min() { return overdue }
            // A switch's `--for` ends like a grant: its run turns it back on.
            let grantEnds = try ledger.grants(now: now).compactMap(\.expires)
            let switchEnds = try ledger.switches().compactMap(\.until)
            return (grantEnds + switchEnds).min()
        } catch {
            throw .ledger(error)
        }
    }

    /// False when the ledger holds no standing decision, no ACL entry record and no grant
    /// waiting to be ended: a run would only probe the devices and change nothing, so a
    /// caller that runs often (on every hotplug event) may skip it.
    public func hasWork() throws(EnforcementError) -> Bool {
        do {
            if !unrecorded.isEmpty { return true }
            let now = clock()
            if try !ledger.grants(now: now).isEmpty { return true }
            if try !ledger.aclEntries().isEmpty { return true }
            // A switch keeps hotplugged nodes off, and a saved node waits to be put back.
            if try !ledger.switches().isEmpty { return true }
            if try !ledger.savedNodeAccess().isEmpty { return true }
            return try !ledger.expiredUnrevoked(now: now).isEmpty
        } catch {
            throw .ledger(error)
        }
    }
}
