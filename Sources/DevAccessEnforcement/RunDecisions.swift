import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger

/// Which standing decision applies to a `devaccess run`, per device.
///
/// A run's program is its user's program: the user's own decisions (user-wide, not a
/// `once` of another process) apply to it, and so do the program grants of its program
/// (same canonical path; the same SHA-256 when the grant pins one) and the `once` grants of
/// this run (their holder is the run's process). The newest that covers the device wins, as
/// for user-wide decisions, so an administrator's later `deny` ends a run's access too.
public struct RunDecisions: Sendable {
    /// Standing grants, newest first.
    public let grants: [Grant]

    public init(active grants: [Grant]) {
        self.grants = grants.sorted { ($0.created, $0.id) > ($1.created, $1.id) }
    }

    /// The decision for a run of `program` by `uid` (process `process`, nil before it
    /// exists) on device `deviceID` of `permission`.
    public func decision(uid: UInt32, program: Program, process: ProcessHolder?, permission: Permission,
                         deviceID: String?) -> Grant? {
        grants.first { grant in
            guard grant.subject.uid == uid, grant.permission == permission,
                  grant.deviceID == nil || deviceID == nil || grant.deviceID == deviceID else { return false }
            if let holder = grant.holder, holder != process { return false }
            guard let granted = grant.program else { return grant.holder == nil && grant.scope != .once }
            return granted.path == program.path && (granted.sha256 == nil || granted.sha256 == program.sha256)
        }
    }

    public func decision(for run: Run, permission: Permission, deviceID: String?) -> Grant? {
        decision(uid: run.subject.uid, program: run.program, process: run.process, permission: permission,
                 deviceID: deviceID)
    }
}
