import Glibc
import DevAccessSystem

/// Who may do what, in one table (USBGuard's section x privilege, reduced to the two
/// classes devaccess has): anyone acts for themselves; root and members of the admin
/// group act for others and on the whole system.
public enum Operation: String, Sendable, CaseIterable {
    case hello
    case statusOfSelf = "status"
    case statusOfOthers = "status for another user"
    case requestForSelf = "request"
    case listPending = "pending"
    case approve
    case reject
    // Served by the admin commands still to come; their rule is set here.
    case grantForOthers = "grant"
    case revokeForOthers = "revoke"
    case resetForOthers = "reset"
    case listEverything = "list"
    case readAudit = "audit"

    public enum Privilege: Sendable {
        case anyone
        case admin
    }

    public var privilege: Privilege {
        switch self {
        case .hello, .statusOfSelf, .requestForSelf: return .anyone
        case .statusOfOthers, .listPending, .approve, .reject, .grantForOthers, .revokeForOthers, .resetForOthers,
             .listEverything, .readAudit:
            return .admin
        }
    }
}

public struct AccessRules: Sendable {
    public var adminGroup: String

    public init(adminGroup: String = "devaccess-admin") {
        self.adminGroup = adminGroup
    }

    /// Root, or a process whose credentials (SO_PEERCRED gid, SO_PEERGROUPS) hold the
    /// admin group. The group is looked up on every call, so one created while the
    /// broker runs counts at once; a session started before its user joined the group
    /// does not hold it, exactly as the kernel sees that session.
    public func isAdmin(_ peer: Peer) -> Bool {
        if peer.uid == 0 { return true }
        guard let gid = Self.groupID(adminGroup) else { return false }
        return peer.isMember(of: gid)
    }

    public func allows(_ operation: Operation, for peer: Peer) -> Bool {
        switch operation.privilege {
        case .anyone: return true
        case .admin: return isAdmin(peer)
        }
    }

    static func groupID(_ name: String) -> UInt32? {
        var size = 1024
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            var group = Glibc.group()
            var result: UnsafeMutablePointer<Glibc.group>?
            let rc = getgrnam_r(name, &group, &buffer, buffer.count, &result)
            if rc == ERANGE {
                size *= 4
                continue
            }
            guard rc == 0, let found = result else { return nil }
            return found.pointee.gr_gid
        }
        return nil
    }
}
