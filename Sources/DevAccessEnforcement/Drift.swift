import DevAccessCore
import DevAccessLedger

/// One disagreement between the ledger and a node's ACL, for one user.
public struct DriftItem: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// The ledger allows the user but the node lacks the ACL entry (reconcile adds it).
        case missingEntry
        /// devaccess's own entry is still there although no grant stands (reconcile removes it).
        case staleEntry
        /// A named entry for a user the ledger has no decision for, not made by devaccess.
        case entryWithoutGrant
        /// A named entry devaccess did not make, for a user the ledger allows: revoke leaves it.
        case unrecordedEntry
        /// The ledger denies the user, yet the kernel lets them open the node (group, other bits...).
        case accessDespiteDenial
        /// The policy forbids the permission to the user, yet the kernel lets them open the
        /// node (group, owner, other bits, an entry devaccess did not make).
        case accessDespitePolicy
        /// The ledger allows the user but the node cannot be examined or is not what udev says.
        case unenforceable
    }

    public var kind: Kind
    public var permission: Permission
    public var deviceID: String
    public var nodePath: String
    public var uid: UInt32
    public var userName: String
    public var grantID: Int64?
    public var message: String

    public init(kind: Kind, permission: Permission, deviceID: String, nodePath: String, uid: UInt32,
                userName: String, grantID: Int64?, message: String) {
        self.kind = kind
        self.permission = permission
        self.deviceID = deviceID
        self.nodePath = nodePath
        self.uid = uid
        self.userName = userName
        self.grantID = grantID
        self.message = message
    }

    public var reason: Reason { Reason(.drift, message) }
}

/// Finds drift for one user on the devices of one report. Pure: the caller supplies the
/// node facts (in the report), the decisions, the records and, when the policy forbids
/// the permission to the user, its reason. Under such a restriction the policy decides
/// each node: any way the user can still open it is drift, whatever the ledger says.
public enum DriftAnalyzer {
    public static func drift(report: AdapterReport, user: UserIdentity, decisions: Decisions,
                             records: [ACLEntryRecord], restriction: Reason? = nil) -> [DriftItem] {
        let recorded = Set(records.compactMap { record -> String? in
            guard case .user(let uid) = record.qualifier, uid == user.uid else { return nil }
            return record.nodePath
        })
        // A node shared by devices (an ALSA control node) that an allowed device needs is not
        // drift under a denial of another device.
        let allowedPaths = Set(report.devices.filter {
            decisions.decision(uid: user.uid, permission: report.permission, deviceID: $0.id)?.decision == .allow
        }.flatMap { $0.nodes.map(\.path) })
        var items: [DriftItem] = []
        for device in report.devices {
            guard case .nodes = device.route else { continue }
            let grant = decisions.decision(uid: user.uid, permission: report.permission, deviceID: device.id)
            for node in device.nodes {
                func item(_ kind: DriftItem.Kind, _ message: String) {
                    items.append(DriftItem(kind: kind, permission: report.permission, deviceID: device.id,
                                           nodePath: node.path, uid: user.uid, userName: user.name,
                                           grantID: grant?.id, message: message))
                }
                guard case .present(let facts) = node.state else {
                    if case .unusable(let why) = node.state, grant?.decision == .allow, let grant {
                        item(.unenforceable, "grant \(grant.id) allows \(user.name) \(report.permission.rawValue) on "
                             + "\(device.id), but \(node.path) cannot be given an ACL entry: \(why)")
                    }
                    continue
                }
                let entry = NodeACL.userEntry(facts, uid: user.uid)
                let ours = recorded.contains(node.path)
                let entryText = entry.map { ACLEntry(tag: .user(user.uid), permissions: $0.permissions,
                                                     qualifierName: user.name).text }
                if let restriction {
                    guard user.uid != 0 else { continue }
                    let result = AccessEvaluator.evaluate(facts, for: user)
                    guard !result.access.intersection(node.required).isEmpty else { continue }
                    item(.accessDespitePolicy, "\(restriction.message), but \(user.name) can open \(node.path) "
                         + "\(result.access.word) "
                         + route(result, facts: facts, user: user, entryText: entryText, ours: ours, rule: "policy"))
                    continue
                }
                switch grant?.decision {
                case .allow?:
                    guard let grant else { continue }
                    let sufficient = entry.map { $0.effective.isSuperset(of: node.required) } ?? false
                    if let entryText, !ours {
                        item(.unrecordedEntry, "\(node.path) has \(entryText), which devaccess did not make; "
                             + (sufficient ? "it serves grant \(grant.id), but revoking will not remove it"
                                           : "devaccess does not change it, so grant \(grant.id) is not in effect there")
                             + " (remove it with 'setfacl -x u:\(user.name) \(node.path)' and run 'devaccess reconcile')")
                    } else if !sufficient {
                        let wanted = ACLEntry(tag: .user(user.uid), permissions: node.required, qualifierName: user.name).text
                        item(.missingEntry, "grant \(grant.id) allows \(user.name) \(report.permission.rawValue) on "
                             + "\(device.id), but \(node.path) has " + (entryText.map { "only \($0) in effect" } ?? "no entry \(wanted)")
                             + "; 'devaccess reconcile' applies it")
                    }
                case .deny?:
                    guard let grant, user.uid != 0, !allowedPaths.contains(node.path) else { continue }
                    let result = AccessEvaluator.evaluate(facts, for: user)
                    guard !result.access.intersection(node.required).isEmpty else { continue }
                    item(.accessDespiteDenial, "grant \(grant.id) denies \(user.name) \(report.permission.rawValue), "
                         + "but \(user.name) can open \(node.path) \(result.access.word) "
                         + route(result, facts: facts, user: user, entryText: entryText, ours: ours, rule: "denial"))
                case nil:
                    guard let entryText else { continue }
                    if ours {
                        item(.staleEntry, "\(node.path) still has devaccess's entry \(entryText) although no grant "
                             + "stands for \(user.name); 'devaccess reconcile' removes it")
                    } else {
                        item(.entryWithoutGrant, "\(node.path) has \(entryText) that no devaccess grant explains "
                             + "(set by hand, or by logind's uaccess for the seat user)")
                    }
                }
            }
        }
        return items
    }

    /// Every uid the drift check should look at: named entries on the nodes, decisions, records.
    public static func subjects(reports: [AdapterReport], decisions: Decisions, records: [ACLEntryRecord]) -> Set<UInt32> {
        var uids = decisions.subjects()
        for record in records {
            if case .user(let uid) = record.qualifier { uids.insert(uid) }
        }
        for report in reports {
            for device in report.devices {
                for node in device.nodes {
                    for entry in node.facts?.acl ?? [] {
                        if case .user(let uid) = entry.tag { uids.insert(uid) }
                    }
                }
            }
        }
        return uids
    }

    /// How the user gets in, and what would make `rule` ("denial", "policy") hold.
    private static func route(_ result: AccessEvaluator.Result, facts: NodeFacts, user: UserIdentity,
                              entryText: String?, ours: Bool, rule: String) -> String {
        switch result.decidedBy {
        case .groupClass(let gids):
            let names = gids.map { gid in
                "'" + (user.groupName(gid) ?? (gid == facts.groupGID ? facts.groupName : nil) ?? String(gid)) + "'"
            }
            return "through group \(names.joined(separator: ", ")) (take \(user.name) out of it for the \(rule) to hold)"
        case .namedUser:
            let entry = entryText ?? "user:\(user.name)"
            return ours ? "through devaccess's entry \(entry); 'devaccess reconcile' removes it"
                        : "through the ACL entry \(entry), which devaccess did not make"
        case .owner:
            return "as the node's owner"
        case .other:
            return "through the node's 'other' permission bits (\(facts.modeOctal))"
        case .superuser:
            return "as root"
        }
    }
}

/// Reading a user's named entry out of node facts.
enum NodeACL {
    struct UserEntry {
        var permissions: AccessMode
        /// After the mask: what the entry really grants.
        var effective: AccessMode
    }

    static func userEntry(_ facts: NodeFacts, uid: UInt32) -> UserEntry? {
        guard let acl = facts.acl else { return nil }
        guard let entry = acl.first(where: { $0.tag == .user(uid) }) else { return nil }
        let mask = acl.first { $0.tag == .mask }?.permissions
        return UserEntry(permissions: entry.permissions, effective: mask.map { entry.permissions.intersection($0) } ?? entry.permissions)
    }
}
