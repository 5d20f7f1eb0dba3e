import DevAccessCore
import Glibc
import CLinux

/// A process that has a given socket open, and who it runs as.
public struct SocketHolder: Sendable, Hashable {
    /// The process (thread group); each of its threads that holds the socket with other
    /// credentials is a holder of its own.
    public var pid: Int32
    public var realUID: UInt32
    public var effectiveUID: UInt32
    /// Its supplementary groups (/proc/PID/status `Groups:`): a process cannot add one
    /// without CAP_SETGID.
    public var groups: [UInt32]
}

/// What one pass over /proc found for one socket.
public struct SocketHolderScan: Sendable, Hashable {
    public var holders: [SocketHolder]
    /// Some process's descriptors could not be read (not for being gone): a holder may be
    /// missing, so the list cannot be taken as all of them.
    public var incomplete: Bool

    /// The `devaccess run` group id (RunGroups) that every holder carries, all of them
    /// running as `uid` (real and effective): the socket is that run's alone. nil when a
    /// holder is outside a run, in another, runs as someone else, when nobody holds the
    /// socket (closed, or in flight in an SCM_RIGHTS message), or the scan is incomplete.
    public func runGroup(uid: UInt32) -> UInt32? {
        guard !incomplete, let first = holders.first else { return nil }
        let groups = Set(first.groups.filter(RunGroups.contains))
        guard groups.count == 1, let group = groups.first else { return nil }
        for holder in holders {
            guard holder.realUID == uid, holder.effectiveUID == uid,
                  Set(holder.groups.filter(RunGroups.contains)) == groups else { return nil }
        }
        return group
    }

    /// Who holds the socket, as far as this scan can tell, for a client the kernel says is `uid`.
    public func holding(uid: UInt32) -> SocketHolding {
        guard !incomplete, !holders.isEmpty else { return .unknown }
        if let group = runGroup(uid: uid) { return .run(group) }
        return .others(runGroups: Set(holders.flatMap { $0.groups.filter(RunGroups.contains) }))
    }
}

/// Who holds a socket, as far as one scan can tell.
public enum SocketHolding: Sendable, Hashable {
    /// The processes of this run (its group id) alone, all running as the client's uid.
    case run(UInt32)
    /// Processes were found, not one run's alone: the run group ids any of them carries.
    case others(runGroups: Set<UInt32>)
    /// Nobody was found (the socket was closed, or is in flight in an SCM_RIGHTS message,
    /// to be taken back later), or some process could not be read: any process may hold it.
    case unknown
}

/// Finds the processes that hold a socket, by its inode (sock_diag's `idiag_inode`): the
/// kernel names an open socket `socket:[INODE]` in /proc/PID/fd, whoever made it and
/// however it got there (inherited, passed with SCM_RIGHTS). Every thread is looked at
/// (/proc/PID/task/TID), not only the leader's /proc/PID/fd: a thread may have a descriptor
/// table of its own (unshare(CLONE_FILES)), and a leader that exited leaves its threads
/// running with an empty /proc/PID/fd. Each holding thread counts with its own
/// credentials. Threads that share a table already read (kcmp) are not read again.
public enum SocketHolders {
    public static func scan(inode: UInt64, proc: String = "/proc") -> SocketHolderScan {
        let target = Array("socket:[\(inode)]".utf8)
        var holders: [SocketHolder] = []
        var incomplete = false
        let walked = ProcessDirectories.forEach(in: proc) { pid, procFD in
            guard let process = ProcessDirectory(pid: pid, in: procFD) else { return }
            let opened = openat(process.fd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard opened >= 0 else {
                if unknown(process) { incomplete = true }
                return
            }
            let tasksDirectory = FileDescriptor(owning: opened)
            let tasks = tasksDirectory.rawValue
            // Threads whose tables were read, and whether the socket was in each.
            var tables: [(tid: Int32, holds: Bool)] = []
            let listed = ProcessDirectories.forEach(directory: tasks) { tid in
                guard let task = ProcessDirectory(pid: tid, in: tasks) else { return }
                let shared = tables.first { devaccess_same_files(tid, $0.tid) == 0 }
                let held: Bool
                if let shared {
                    held = shared.holds
                } else {
                    let fdDirectory = openat(task.fd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    guard fdDirectory >= 0 else {
                        // Gone meanwhile: holds nothing. Anything else: this thread is unknown.
                        if unknown(task) { incomplete = true }
                        return
                    }
                    held = holds(fdDirectory, target)
                    tables.append((tid, held))
                }
                guard held, let credentials = task.credentials(), !credentials.hasExited else { return }
                // One holder per process and credentials: threads alike are one holder.
                let holder = SocketHolder(pid: pid, realUID: credentials.realUID,
                                          effectiveUID: credentials.effectiveUID, groups: credentials.groups)
                if !holders.contains(holder) { holders.append(holder) }
            }
            if !listed { incomplete = true }
        }
        return SocketHolderScan(holders: holders, incomplete: incomplete || !walked)
    }

    /// Whether a directory that could not be opened belongs to a live thread that may hold
    /// descriptors (not gone, not a kernel thread, not exited).
    private static func unknown(_ process: borrowing ProcessDirectory) -> Bool {
        guard errno != ENOENT && errno != ESRCH, let credentials = process.credentials() else { return false }
        return !credentials.kernelThread && !credentials.hasExited
    }

    /// Whether any descriptor in an open /proc/PID/fd links to `target`; takes `directory`
    /// over (closes it). The link is compared as bytes: no String per descriptor.
    private static func holds(_ directory: CInt, _ target: [UInt8]) -> Bool {
        guard let listing = try? FileDescriptor(owning: directory).directoryStream() else { return false }
        defer { closedir(listing) }
        var buffer = [CChar](repeating: 0, count: 64)
        while let entry = readdir(listing) {
            guard ProcessDirectories.numericName(entry) != nil else { continue }
            let count = withUnsafeBytes(of: &entry.pointee.d_name) { name -> Int in
                guard let base = name.baseAddress?.assumingMemoryBound(to: CChar.self) else { return -1 }
                return readlinkat(directory, base, &buffer, buffer.count)
            }
            guard count == target.count else { continue }
            if buffer.withUnsafeBytes({ $0.prefix(count).elementsEqual(target) }) { return true }
        }
        return false
    }
}
