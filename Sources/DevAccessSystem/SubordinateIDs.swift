import Glibc
import Synchronization

/// /etc/subuid: the uids each login user may map into a user namespace of its own with
/// newuidmap (useradd hands every new user 65,536 of them). A socket made inside such a
/// namespace reaches devaccessd as one of those uids (SO_PEERCRED, sock_diag), so a limit
/// or budget kept per uid would count one person 65,536 times: `accountable(_:)` gives the
/// uid a subordinate uid's use is charged to, its owner's.
public enum SubordinateIDs {
    public static let path = "/etc/subuid"

    struct Range: Sendable, Hashable {
        var owner: UInt32
        var start: UInt32
        var count: UInt32
        func contains(_ uid: UInt32) -> Bool { uid >= start && UInt64(uid) < UInt64(start) + UInt64(count) }
    }

    /// The file's ranges, read again when its modification time or size changes.
    private static let cache = Mutex<(stamp: [Int], ranges: [Range])>(([], []))

    /// The uid charged for `uid`: the owner of the subordinate range holding it, else itself.
    public static func accountable(_ uid: UInt32, file: String = path) -> UInt32 {
        owner(of: uid, file: file) ?? uid
    }

    /// The login user whose subordinate range holds `uid`; nil when none does.
    public static func owner(of uid: UInt32, file: String = path) -> UInt32? {
        ranges(file).first { $0.contains(uid) }?.owner
    }

    static func ranges(_ file: String) -> [Range] {
        var info = stat()
        guard stat(file, &info) == 0 else { return [] }
        let stamp = [Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec), Int(info.st_size), Int(info.st_ino)]
        if let cached = cache.withLock({ $0.stamp == stamp ? $0.ranges : nil }) { return cached }
        // Root's file (0644): read it whole; a file past 4 MiB is not /etc/subuid as useradd writes it.
        guard info.st_size < 4 << 20, let handle = fopen(file, "r") else { return [] }
        defer { fclose(handle) }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let read = bytes.isEmpty ? 0 : fread(&bytes, 1, bytes.count, handle)
        let ranges = parse(String(decoding: bytes.prefix(read), as: UTF8.self))
        cache.withLock { $0 = (stamp, ranges) }
        return ranges
    }

    /// `NAME:START:COUNT` lines (NAME a user name or a uid); others are skipped.
    static func parse(_ text: String) -> [Range] {
        text.split(separator: "\n").compactMap { line -> Range? in
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count == 3, let start = UInt32(fields[1]), let count = UInt32(fields[2]), count > 0 else {
                return nil
            }
            let name = String(fields[0])
            guard let owner = UInt32(name) ?? (try? UserDatabase.identity(for: name))?.uid else { return nil }
            return Range(owner: owner, start: start, count: count)
        }
    }
}
