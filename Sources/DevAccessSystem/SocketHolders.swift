import DevAccessCore
import Glibc

/// A process that has a given socket open, and who it runs as.
public struct SocketHolder: Sendable, Hashable {
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
}

/// Finds the processes that hold a socket, by its inode (sock_diag's `idiag_inode`): the
/// kernel names an open socket `socket:[INODE]` in /proc/PID/fd, whoever made it and
/// however it got there (inherited, passed with SCM_RIGHTS). Only the thread-group
/// leader's descriptor table is read (/proc/PID/fd), as `NodeHolders` does.
public enum SocketHolders {
    public static func scan(inode: UInt64, proc: String = "/proc") -> SocketHolderScan {
        let target = Array("socket:[\(inode)]".utf8)
        var holders: [SocketHolder] = []
        var incomplete = false
        let walked = ProcessDirectories.forEach(in: proc) { pid, procFD in
            guard let process = ProcessDirectory(pid: pid, in: procFD) else { return }
            let fdDirectory = openat(process.fd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fdDirectory >= 0 else {
                // Gone meanwhile: holds nothing. Anything else: this process is unknown.
                if errno != ENOENT && errno != ESRCH,
                   let credentials = process.credentials(), !credentials.kernelThread, !credentials.hasExited {
                    incomplete = true
                }
                return
            }
            guard holds(fdDirectory, target), let credentials = process.credentials(), !credentials.hasExited else {
                return
            }
            holders.append(SocketHolder(pid: pid, realUID: credentials.realUID, effectiveUID: credentials.effectiveUID,
                                        groups: credentials.groups))
        }
        return SocketHolderScan(holders: holders, incomplete: incomplete || !walked)
    }

    /// Whether any descriptor in an open /proc/PID/fd links to `target`; takes `directory`
    /// over (closes it). The link is compared as bytes: no String per descriptor.
    private static func holds(_ directory: CInt, _ target: [UInt8]) -> Bool {
        guard let listing = fdopendir(directory) else {
            close(directory)
            return false
        }
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
