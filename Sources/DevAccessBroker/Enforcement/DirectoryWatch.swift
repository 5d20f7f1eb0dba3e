import Glibc
import DevAccessSystem

/// inotify(7) on a few directories, reporting only the entries it was asked about.
/// Confined to the enforcement worker thread, which polls `descriptor`.
///
/// Used for three things: the ledger's directory (another process, e.g. the root CLI,
/// committed a grant, so the next expiry may have moved), the policy's directory and its
/// `conf.d` (a changed policy is reloaded and applied), and, in DEBUG builds, the
/// directories of declared test nodes (a node re-created with mknod, where no udev event
/// exists).
final class DirectoryWatch {
    enum Purpose: Sendable, Hashable {
        case ledger
        case nodes
        case policy
    }

    /// In `names`: every entry of the directory.
    static let anyName = "*"

    struct Event: Sendable, Hashable {
        var purpose: Purpose
        var path: String
        var mask: UInt32
    }

    let descriptor: CInt
    /// The inotify instance, owned here: closed when the watch goes.
    private let owner: FileDescriptor
    /// Per watch descriptor: its directory and which entries matter for what. One
    /// directory may serve both purposes (one inotify watch, masks added together).
    private var watches: [CInt: (directory: String, names: [String: Purpose])] = [:]
    private var reader = InotifyReader()

    init() throws(Errno) {
        let fd = inotify_init1(CInt(IN_CLOEXEC) | CInt(IN_NONBLOCK))
        guard fd >= 0 else { throw Errno.current }
        descriptor = fd
        owner = FileDescriptor(owning: fd)
    }

    /// Watches `directory` for `names` appearing, disappearing or (for the ledger) being
    /// written. Not recursive; the directory must exist.
    func watch(_ directory: String, names: Set<String>, for purpose: Purpose) throws(Errno) {
        let wd = inotify_add_watch(descriptor, directory, Self.mask(purpose) | UInt32(IN_ONLYDIR) | UInt32(IN_MASK_ADD))
        guard wd >= 0 else { throw Errno.current }
        var entries = watches[wd]?.names ?? [:]
        for name in names { entries[name] = purpose }
        watches[wd] = (directory, entries)
    }

    private static func mask(_ purpose: Purpose) -> UInt32 {
        switch purpose {
        case .ledger:
            // Every commit writes the WAL file; a checkpoint or a new ledger the main file.
            return UInt32(IN_MODIFY) | UInt32(IN_CLOSE_WRITE) | UInt32(IN_CREATE) | UInt32(IN_MOVED_TO)
        case .nodes:
            // Not IN_ATTRIB: the engine's own ACL edits would wake it again for nothing.
            return UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_MOVED_TO) | UInt32(IN_MOVED_FROM)
        case .policy:
            // A file counts once written and closed, or renamed into place (editors, package
            // managers); IN_CREATE only for `conf.d` appearing (a new file is still empty).
            return UInt32(IN_CLOSE_WRITE) | UInt32(IN_MOVED_TO) | UInt32(IN_MOVED_FROM) | UInt32(IN_DELETE)
                | UInt32(IN_CREATE) | UInt32(IN_ATTRIB)
        }
    }

    /// Everything queued now (the descriptor is non-blocking). A queue overflow is
    /// reported once per purpose with an empty path: anything may have changed.
    func drain() -> [Event] {
        var events: [Event] = []
        for record in reader.drain(descriptor) {
            let (wd, mask, name) = (record.watch, record.mask, record.name)
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                events.append(Event(purpose: .ledger, path: "", mask: mask))
                events.append(Event(purpose: .nodes, path: "", mask: mask))
                events.append(Event(purpose: .policy, path: "", mask: mask))
                continue
            }
            guard let watch = watches[wd] else { continue }
            if mask & UInt32(IN_IGNORED) != 0 {
                // The directory itself went away: nothing more will come from it.
                watches[wd] = nil
                for purpose in Set(watch.names.values) {
                    events.append(Event(purpose: purpose, path: watch.directory, mask: mask))
                }
                continue
            }
            guard let purpose = watch.names[name] ?? watch.names[Self.anyName], mask & Self.mask(purpose) != 0
            else { continue }
            if purpose == .policy && mask & UInt32(IN_CREATE) != 0 && mask & UInt32(IN_ISDIR) == 0 { continue }
            events.append(Event(purpose: purpose, path: watch.directory + "/" + name, mask: mask))
        }
        return events
    }
}
