import CLinux
import Glibc
import Synchronization
import DevAccessSystem

/// Tells PolicyKeeper whether the policy files may have changed since a read, so a parsed
/// policy is kept between hotplug passes and requests instead of read and parsed for each
/// (docs/performance.md, "Hotplug: replug -> ACL entry").
///
/// inotify on the policy directory, on its `conf.d` and on the directory's parent (for its
/// own name only: the directory replaced by a rename, or a symlink to it retargeted). Any
/// event at all on the first two (a file created, deleted, renamed in or out, written,
/// closed after writing, its mode or owner changed, the directory itself moved or deleted),
/// the watch removed (IN_IGNORED) or the queue overflowing (IN_Q_OVERFLOW) drops what was
/// kept. The queue is read before every use, and the kernel queues an event before the
/// system call that caused it returns, so a policy asked for after a change is read again.
///
/// Nothing is kept (every use reads the files) while:
/// - a watch cannot be set (no inotify, ENOSPC on watches), or the directory's parent
///   does not exist;
/// - the directory path is not its own real path (a symlinked ancestor can be retargeted
///   where no watch sees it);
/// - the directory or `conf.d` is not on a local file system (NFS, 9p, CIFS, FUSE: a change
///   made by another machine or the host makes no inotify event here);
/// - a policy file is a symlink or has another hard link. Each file is watched itself too,
///   so a hard link made to one after the read (its link count changes: IN_ATTRIB on the
///   file, none on the directory) drops what was kept, and the next read sees the link.
final class PolicyFilesWatch: Sendable {
    let directory: String
    private let descriptor: CInt
    /// The inotify instance, owned here (none when `keeps` is false or it failed).
    private let owner: FileDescriptor?
    private struct State {
        /// Bumped by every event that may mean the files changed.
        var generation: UInt64 = 1
        /// The parent watch: only records naming the directory count.
        var parentWatch: CInt?
        var reader = InotifyReader(capacity: 4096)
    }
    private let state = Mutex(State())
    /// DEBUG tests: every watch fails with this errno (as when the watch limit is reached).
    private let failWatchesWith: CInt?

    /// `keeps` false: no inotify instance, nothing is ever kept.
    init(directory: String, keeps: Bool = true, failWatchesWith: CInt? = nil) {
        self.directory = directory
        self.failWatchesWith = failWatchesWith
        descriptor = keeps ? inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK)) : -1
        owner = descriptor >= 0 ? FileDescriptor(owning: descriptor) : nil
    }

    /// What a read begins under: nil when a read now cannot be kept (see the type's list).
    /// Sets the watches first, so a change made after this returns is an event.
    func beginRead() -> UInt64? {
        guard descriptor >= 0, failWatchesWith == nil else { return nil }
        return state.withLock { state -> UInt64? in
            drain(&state)
            guard setWatches(&state), watchFiles() else { return nil }
            return state.generation
        }
    }

    /// Whether nothing that may change the files happened since `beginRead` gave `generation`.
    func unchanged(since generation: UInt64) -> Bool {
        guard descriptor >= 0 else { return false }
        return state.withLock { state in
            drain(&state)
            return state.generation == generation
        }
    }

    private func setWatches(_ state: inout State) -> Bool {
        let everything = UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM) | UInt32(IN_MOVED_TO)
            | UInt32(IN_CLOSE_WRITE) | UInt32(IN_MODIFY) | UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF)
            | UInt32(IN_MOVE_SELF) | UInt32(IN_ONLYDIR)
        guard let real = realpath(directory, nil) else { return false }
        defer { free(real) }
        guard String(cString: real) == directory || directory.hasSuffix("/") && String(cString: real) + "/" == directory
        else { return false }
        let parent = StatusInputsCache.parent(of: directory)
        let parentWatch = inotify_add_watch(descriptor, parent, UInt32(IN_CREATE) | UInt32(IN_DELETE)
            | UInt32(IN_MOVED_FROM) | UInt32(IN_MOVED_TO) | UInt32(IN_ATTRIB) | UInt32(IN_DELETE_SELF)
            | UInt32(IN_MOVE_SELF) | UInt32(IN_ONLYDIR))
        guard parentWatch >= 0 else { return false }
        if state.parentWatch != parentWatch {
            state.parentWatch = parentWatch
            state.generation &+= 1
        }
        guard inotify_add_watch(descriptor, directory, everything) >= 0, Self.isLocal(directory) else { return false }
        let dropIns = directory + "/" + PolicyFiles.dropInDirectory
        if inotify_add_watch(descriptor, dropIns, everything) < 0 {
            // Not there: its creation is an event on the directory.
            return errno == ENOENT
        }
        return Self.isLocal(dropIns)
    }

    private func drain(_ state: inout State) {
        let records = state.reader.drain(descriptor)
        guard !records.isEmpty else { return }
        let name = StatusInputsCache.base(of: directory)
        for record in records where Self.invalidates(record, parentWatch: state.parentWatch, name: name) {
            if record.watch == state.parentWatch && record.mask & UInt32(IN_IGNORED) != 0 { state.parentWatch = nil }
            state.generation &+= 1
        }
    }

    /// Whether a record may mean the policy changed: every record does (an overflow, a watch
    /// removed, any change in the directory or conf.d) except one of the parent directory's
    /// about another entry than the policy directory.
    static func invalidates(_ record: InotifyRecord, parentWatch: CInt?, name: String) -> Bool {
        guard record.watch == parentWatch else { return true }
        if record.mask & (UInt32(IN_IGNORED) | UInt32(IN_Q_OVERFLOW)) != 0 || record.name.isEmpty { return true }
        return record.name == name
    }

    /// File systems whose every change is made by this kernel (so inotify hears of it):
    /// ext2/3/4, XFS, Btrfs, tmpfs, ramfs, F2FS, ZFS, bcachefs, overlayfs (its upper layer).
    static let localFileSystems: Set<Int> = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x8584_58F6,
                                             0xF2F5_2010, 0x2FC1_2FC1, 0xCA45_1A4E, 0x794C_7630]

    static func isLocal(_ path: String) -> Bool {
        fileSystemType(path).map(localFileSystems.contains) ?? false
    }

    /// statfs's f_type of the file system holding `path`; nil when statfs fails.
    static func fileSystemType(_ path: String) -> Int? {
        let type = devaccess_fs_type(path)
        return type < 0 ? nil : Int(type)
    }

    /// Watches devaccess.conf and each conf.d/*.conf themselves (a hard link made to one,
    /// which changes its link count, is an event only on the file; so is a write through
    /// another name), then checks each has a single name (not a symlink, one hard link).
    /// False when one does not, or conf.d cannot be listed.
    private func watchFiles() -> Bool {
        let fileMask = UInt32(IN_ATTRIB) | UInt32(IN_MODIFY) | UInt32(IN_CLOSE_WRITE) | UInt32(IN_DELETE_SELF)
            | UInt32(IN_MOVE_SELF) | UInt32(IN_DONT_FOLLOW)
        func watched(_ path: String) -> Bool {
            if inotify_add_watch(descriptor, path, fileMask) < 0 && errno != ENOENT { return false }
            return StatusInputsCache.singleName(path, orAbsent: true)
        }
        guard watched(directory + "/" + PolicyFiles.mainFile) else { return false }
        let dropIns = directory + "/" + PolicyFiles.dropInDirectory
        guard let stream = opendir(dropIns) else { return errno == ENOENT }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard name.hasSuffix(".conf") else { continue }
            guard watched(dropIns + "/" + name) else { return false }
        }
        return true
    }
}
