import FoundationEssentials
import Glibc
import DevAccessCore

/// A program devaccessd starts for `devaccess run`, as asked: who, what, which permissions.
public struct NewRun: Sendable, Hashable {
    public var subject: Principal
    public var program: Program
    public var permissions: [Permission]
    /// `--strict`: the program may not open capture nodes it was not granted, even through
    /// its user's own groups.
    public var strict: Bool

    public init(subject: Principal, program: Program, permissions: [Permission], strict: Bool = false) {
        self.subject = subject
        self.program = program
        self.permissions = permissions
        self.strict = strict
    }
}

/// A run as recorded.
public struct Run: Sendable, Hashable, Identifiable {
    public var id: Int64
    public var subject: Principal
    public var program: Program
    public var permissions: [Permission]
    /// The group id this run's program carries (RunGroups), named by the nodes' ACL entries
    /// while the run lasts.
    public var gid: UInt32
    public var strict: Bool
    /// The program's process; nil while the run is being started.
    public var process: ProcessHolder?
    public var started: Date
    public var ended: Date?
    /// "exited 0", "signal 15", or why the run ended without a status.
    public var endStatus: String?

    public var isLive: Bool { ended == nil }

    /// The group id of run `id`: ids are handed out in order and wrap only after the range.
    public static func groupID(forRun id: Int64) -> UInt32 {
        let offset = UInt32(truncatingIfNeeded: (id - 1) % Int64(RunGroups.count))
        return RunGroups.first + offset
    }
}
