import Glibc
import DevAccessCore
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
    // decide, revoke, reset, list, reconcile, withdraw, audit-verify and audit-archive are decided by
    // `EngineService` (DevAccessInterface), which devaccessd and `--offline` share.

    public enum Privilege: Sendable {
        case anyone
        case admin
    }

    public var privilege: Privilege {
        switch self {
        case .hello, .statusOfSelf, .requestForSelf: return .anyone
        case .statusOfOthers, .listPending, .approve, .reject:
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
    /// admin group **and** whose user is still a member as a fresh login sees it (NSS).
    /// The group is looked up on every call, so one created while the broker runs counts
    /// at once; a session started before its user joined the group does not hold it,
    /// exactly as the kernel sees that session; and a session started before its user was
    /// removed from the group (`gpasswd -d`, `usermod -G`) still holds the gid but is no
    /// administrator any more: the credentials alone would keep an ex-administrator's
    /// tmux or background process approving and granting for as long as it runs. A uid
    /// with no passwd entry (a subordinate uid) is never an administrator. NSS is asked
    /// only for a process that holds the gid.
    public func isAdmin(_ peer: Peer) -> Bool {
        if peer.uid == 0 { return true }
        guard let gid = UserDatabase.groupID(adminGroup), peer.isMember(of: gid) else { return false }
        guard let user = try? UserDatabase.identity(uid: peer.uid) else { return false }
        return user.isMember(of: gid)
    }

    public func allows(_ operation: Operation, for peer: Peer) -> Bool {
        switch operation.privilege {
        case .anyone: return true
        case .admin: return isAdmin(peer)
        }
    }
}
