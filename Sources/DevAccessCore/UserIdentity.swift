/// A user as the kernel would see a fresh login of theirs: uid, primary gid and
/// every group from the group database (`getgrouplist`). Names are for reasons only.
public struct UserIdentity: Sendable, Hashable, Codable {
    public var uid: UInt32
    public var name: String
    public var primaryGID: UInt32
    /// All groups of the user, primary included, with their names when known.
    public var groups: [GroupRef]

    public init(uid: UInt32, name: String, primaryGID: UInt32, groups: [GroupRef]) {
        self.uid = uid
        self.name = name
        self.primaryGID = primaryGID
        self.groups = groups
    }

    public func isMember(of gid: UInt32) -> Bool {
        gid == primaryGID || groups.contains { $0.gid == gid }
    }

    public func groupName(_ gid: UInt32) -> String? { groups.first { $0.gid == gid }?.name }
}

public struct GroupRef: Sendable, Hashable, Codable {
    public var gid: UInt32
    public var name: String?
    public init(gid: UInt32, name: String?) {
        self.gid = gid
        self.name = name
    }
}
