import DevAccessCore
import DevAccessLedger

/// What one engine run changed on the machine and in the ledger, what it refused, and the
/// drift it left (entries it did not create are reported, never removed).
public struct EnforcementReport: Sendable, Hashable {
    /// Grants whose time ran out and that this run ended.
    public var expired: [Grant] = []
    /// Runs of `devaccess run` this pass found ended (their process gone while nobody watched).
    public var runsEnded: [Run] = []
    /// Grants the policy forbids now and that this run ended.
    public var endedByPolicy: [PolicyEnded] = []
    public var changes: [EnforcementChange] = []
    /// Nodes the engine would not or could not touch; the exit code of the CLI says so.
    public var problems: [EnforcementProblem] = []
    public var drift: [DriftItem] = []
    /// Privacy switches whose `--for` ran out and that this run turned back on.
    public var switchesEnded: [PrivacySwitch] = []
    /// Facts worth telling that are neither changes nor problems.
    public var notes: [String] = []

    public init() {}

    public var changedNothing: Bool { expired.isEmpty && endedByPolicy.isEmpty && changes.isEmpty }
}

public struct EnforcementChange: Sendable, Hashable {
    public enum Action: String, Sendable, Hashable {
        /// `user:<uid>:rw-` added (or widened) on a node.
        case aclAdded
        /// devaccess's entry removed from a node.
        case aclRemoved
        /// A record dropped without an ACL edit: the node went away or was replaced, so the
        /// entry went with the old inode.
        case recordDropped
        /// A privacy switch (`--hard`) saved a node's access and took it away.
        case accessTaken
        /// A node's access saved by a privacy switch was put back.
        case accessRestored
    }

    public var action: Action
    public var nodePath: String
    public var uid: UInt32
    public var userName: String
    public var permission: Permission?
    public var deviceID: String
    public var grantID: Int64?
    public var message: String
}

public struct EnforcementProblem: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        /// The node is not the character device udev reports (symlink, file, other numbers).
        case refused
        /// The edit was attempted and failed (file system without ACLs, I/O error...).
        case failed
    }

    public var kind: Kind
    public var nodePath: String
    public var uid: UInt32
    public var userName: String
    public var permission: Permission?
    public var deviceID: String?
    public var message: String
}
