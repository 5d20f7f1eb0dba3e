// What `status` and `doctor` say about the gate: values only; `GateAnalyzer`
// (DevAccessEnforcement) finds them.

/// Whether devaccess is the only way to a capture node: who can open it without a
/// devaccess grant (the node's owner, members of its groups, everyone through `other`,
/// the active seat user through logind's `uaccess` tag, named ACL entries devaccess did
/// not make), and whether the opt-in deny-by-default udev rules are in force.
public struct GateReport: Sendable, Hashable {
    public var denyByDefault: DenyByDefaultRules
    public var nodes: [GateNode]

    public init(denyByDefault: DenyByDefaultRules, nodes: [GateNode]) {
        self.denyByDefault = denyByDefault
        self.nodes = nodes
    }

    /// True when no capture node can be opened by anyone but root without devaccess.
    public var isEffective: Bool { nodes.allSatisfy(\.openers.isEmpty) }

    /// One sentence for people.
    public var summary: String {
        let open = nodes.filter { !$0.openers.isEmpty }
        if nodes.isEmpty { return "no capture nodes to check" }
        if open.isEmpty { return "devaccess is the only way to the \(nodes.count) capture node(s): nobody but root opens them without it" }
        return "\(open.count) of \(nodes.count) capture node(s) can be opened without devaccess"
    }
}

/// The opt-in `72-devaccess-deny-by-default.rules`: installed where, and whether it has
/// taken effect (no capture node carries the `uaccess` tag any more).
public struct DenyByDefaultRules: Sendable, Hashable {
    public static let fileName = "72-devaccess-deny-by-default.rules"
    /// Where udev reads rules, in its order of precedence (the first file of a name wins).
    public static let directories = ["/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d",
                                     "/usr/lib/udev/rules.d", "/lib/udev/rules.d"]

    /// The file udev uses, nil when none is installed (or it is masked with /dev/null).
    public var installed: String?
    /// Installed and every capture node has lost `uaccess`; nil when there is no node to tell.
    public var active: Bool?
    public var message: String

    public init(installed: String?, active: Bool?, message: String) {
        self.installed = installed
        self.active = active
        self.message = message
    }
}

/// One capture node and who opens it without devaccess.
public struct GateNode: Sendable, Hashable {
    public var path: String
    public var permission: Permission
    public var deviceID: String
    public var openers: [GateOpener]

    public init(path: String, permission: Permission, deviceID: String, openers: [GateOpener]) {
        self.path = path
        self.permission = permission
        self.deviceID = deviceID
        self.openers = openers
    }
}

/// One way in that is not devaccess's.
public struct GateOpener: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        /// The node's owner (not root).
        case owner
        /// Members of the node's owning group (`video`, `audio`).
        case group
        /// A named group entry in the ACL.
        case aclGroup
        /// A named user entry devaccess did not make (or, without the ledger, cannot tell).
        case aclUser
        /// Everyone, through the node's `other` bits.
        case other
        /// Whoever is the active user of the seat: logind adds their entry (udev tag `uaccess`).
        case seat
    }

    public var kind: Kind
    /// The user or group named (empty for `other` and `seat`).
    public var name: String
    /// Group members (for `group`, `aclGroup`).
    public var members: [String]?
    public var access: AccessMode
    /// For `aclUser`: whether devaccess made it (nil: the ledger could not be read).
    public var devaccess: Bool?
    public var message: String

    public init(kind: Kind, name: String, members: [String]? = nil, access: AccessMode, devaccess: Bool? = nil,
                message: String) {
        self.kind = kind
        self.name = name
        self.members = members
        self.access = access
        self.devaccess = devaccess
        self.message = message
    }
}
