/// The group ids `devaccess run` gives the programs it starts, one per run.
///
/// A run's program gets its user's groups plus one group id of its own, and the device nodes
/// of its granted permissions get an ACL entry for that id while the run lasts. When the run
/// ends the entry goes, so a descendant that outlived it (double-forked, `setsid`) holds an id
/// no node names any more. Ids are handed out in order and wrap only after the whole range, and
/// never while a live process still carries the id, so a leftover process (or a setgid file it
/// made) does not meet its id again on a later run's nodes.
///
/// The range lies in 0x7A000000–0x7AFFFFFF: above the ranges systemd assigns to system, regular,
/// homed and dynamic users and to nspawn containers (UIDS-GIDS.md), below 2^31 (which some
/// tools read as negative). An id someone else can hold is skipped when a run starts: one the
/// user database names as a group, or one /etc/subgid hands to a user (who can map it into a
/// user namespace of their own with newgidmap and take it as a group there).
public enum RunGroups {
    public static let first: UInt32 = 0x7A00_0000
    public static let count: UInt32 = 0x0100_0000

    public static var last: UInt32 { first + (count - 1) }

    /// Whether `gid` is one of the ids `devaccess run` hands out.
    public static func contains(_ gid: UInt32) -> Bool { gid >= first && gid <= last }
}
