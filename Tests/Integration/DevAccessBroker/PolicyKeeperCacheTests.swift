import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessSystem
import DevAccessTestSupport
@testable import DevAccessBroker

/// PolicyKeeper keeps the parsed policy between requests and hotplug passes only while
/// inotify says nothing changed (PolicyFilesWatch). Truth first: after every kind of change
/// a hostile or careless hand can make (written in place, renamed in, created, deleted,
/// chmod, the directory replaced, a symlink or hard link edited through its other name),
/// the very next `current()` (which every request and every engine pass asks) gives the new
/// policy, with no thread having to wake first.
@Suite(.serialized, .enabled(if: isRoot, "policy files must be root's"))
struct PolicyKeeperCacheTests {
    static func write(_ text: String, _ path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o644)
    }

    /// Writes through the existing inode: no rename, so only IN_MODIFY / IN_CLOSE_WRITE.
    static func writeInPlace(_ text: String, _ path: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: 0)
        try handle.write(contentsOf: Data(text.utf8))
        try handle.close()
    }

    static func camera(_ keeper: PolicyKeeper) -> PolicyAction? {
        guard case .loaded(let policy) = keeper.current() else { return nil }
        return policy.defaults[.camera]?.action
    }

    /// A keeper of `directory` whose policy (camera `action`) is kept: a second ask reads nothing.
    static func kept(_ directory: String, _ action: PolicyAction) throws -> PolicyKeeper {
        let keeper = PolicyKeeper(directory: directory, log: BrokerLog(target: .none))
        #expect(camera(keeper) == action)
        let reads = keeper.reads.load(ordering: .relaxed)
        #expect(camera(keeper) == action)
        #expect(keeper.reads.load(ordering: .relaxed) == reads, "an unchanged policy is kept, not read again")
        return keeper
    }

    static func config() throws -> (TemporaryDirectory, String) {
        let config = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: true)
        chmod(config.path + "/conf.d", 0o755)
        let main = config.path + "/devaccess.conf"
        try write("[camera]\nDefault=allow\n", main)
        return (config, main)
    }

    @Test func aFileWrittenInPlaceCountsAtOnce() throws {
        let (config, main) = try Self.config()
        let keeper = try Self.kept(config.path, .allow)
        try Self.writeInPlace("[camera]\nDefault=deny\n", main)
        #expect(Self.camera(keeper) == .deny)
        let dropIn = config.path + "/conf.d/50-x.conf"
        try Self.write("[camera]\nDefault=ask\n", dropIn)
        _ = Self.camera(keeper)
        _ = Self.camera(keeper)
        try Self.writeInPlace("[camera]\nDefault=allow\n", dropIn)
        #expect(Self.camera(keeper) == .allow, "a drop-in written in place")
    }

    @Test func aFileRenamedInCreatedOrDeletedCountsAtOnce() throws {
        let (config, main) = try Self.config()
        let keeper = try Self.kept(config.path, .allow)
        // Renamed over the main file (IN_MOVED_TO), as editors and package managers do.
        try Self.write("[camera]\nDefault=deny\n", config.path + "/new.tmp")
        #expect(rename(config.path + "/new.tmp", main) == 0)
        #expect(Self.camera(keeper) == .deny)
        // A drop-in created (IN_CREATE), then renamed in (IN_MOVED_TO), then deleted (IN_DELETE).
        _ = Self.camera(keeper)
        let dropIn = config.path + "/conf.d/50-x.conf"
        try Self.write("[camera]\nDefault=ask\n", dropIn)
        #expect(Self.camera(keeper) == .ask, "a drop-in created")
        _ = Self.camera(keeper)
        try Self.write("[camera]\nDefault=allow\n", config.path + "/conf.d/x.tmp")
        #expect(rename(config.path + "/conf.d/x.tmp", config.path + "/conf.d/60-y.conf") == 0)
        #expect(Self.camera(keeper) == .allow, "a drop-in renamed in")
        _ = Self.camera(keeper)
        #expect(unlink(config.path + "/conf.d/60-y.conf") == 0)
        #expect(Self.camera(keeper) == .ask, "a drop-in deleted")
        _ = Self.camera(keeper)
        // A file renamed out (IN_MOVED_FROM).
        #expect(rename(dropIn, config.path + "/conf.d/50-x.off") == 0)
        #expect(Self.camera(keeper) == .deny, "a drop-in renamed out")
    }

    @Test func aChmodOrChownIsReadAgain() throws {
        let (config, main) = try Self.config()
        let keeper = try Self.kept(config.path, .allow)
        // Made writable by others: refused, the last good stays (same answer), but it was read.
        var reads = keeper.reads.load(ordering: .relaxed)
        #expect(chmod(main, 0o666) == 0)
        #expect(Self.camera(keeper) == .allow)
        #expect(keeper.reads.load(ordering: .relaxed) == reads + 1, "IN_ATTRIB (chmod) dropped what was kept")
        #expect(chmod(main, 0o644) == 0)
        _ = Self.camera(keeper)
        _ = Self.camera(keeper)
        reads = keeper.reads.load(ordering: .relaxed)
        #expect(chown(config.path + "/conf.d", 65534, 65534) == 0)
        #expect(Self.camera(keeper) == .allow)
        #expect(keeper.reads.load(ordering: .relaxed) == reads + 1, "IN_ATTRIB (chown of conf.d) dropped it")
    }

    @Test func theDirectoryReplacedByARenameCountsAtOnce() throws {
        let parent = try TemporaryDirectory()
        let directory = parent.path + "/devaccess"
        for (name, action) in [("devaccess", "allow"), ("next", "deny")] {
            try FileManager.default.createDirectory(atPath: parent.path + "/" + name, withIntermediateDirectories: true)
            chmod(parent.path + "/" + name, 0o755)
            try Self.write("[camera]\nDefault=\(action)\n", parent.path + "/\(name)/devaccess.conf")
        }
        let keeper = try Self.kept(directory, .allow)
        #expect(rename(directory, parent.path + "/old") == 0)
        #expect(rename(parent.path + "/next", directory) == 0)
        #expect(Self.camera(keeper) == .deny)
        // And the new directory is watched in turn.
        _ = Self.camera(keeper)
        try Self.writeInPlace("[camera]\nDefault=ask\n", directory + "/devaccess.conf")
        #expect(Self.camera(keeper) == .ask)
        // conf.d made after the read: its creation counts, then what it holds.
        _ = Self.camera(keeper)
        try FileManager.default.createDirectory(atPath: directory + "/conf.d", withIntermediateDirectories: true)
        chmod(directory + "/conf.d", 0o755)
        _ = Self.camera(keeper)
        try Self.write("[camera]\nDefault=allow\n", directory + "/conf.d/50-x.conf")
        #expect(Self.camera(keeper) == .allow, "a drop-in in a conf.d made after the first read")
    }

    @Test func aFileReachedThroughAnotherNameIsNeverKept() throws {
        let elsewhere = try TemporaryDirectory()
        for file in ["devaccess.conf", "conf.d/50-local.conf"] {
            for hard in [false, true] {
                let (config, _) = try Self.config()
                let path = config.path + "/" + file
                _ = unlink(path)
                let target = elsewhere.path + "/\(hard)-\(file.count).conf"
                try Self.write("[camera]\nDefault=allow\n", target)
                if hard {
                    #expect(link(target, path) == 0)
                } else {
                    #expect(symlink(target, path) == 0)
                }
                let keeper = PolicyKeeper(directory: config.path, log: BrokerLog(target: .none))
                for _ in 0..<3 { #expect(Self.camera(keeper) == .allow) }
                try Self.writeInPlace("[camera]\nDefault=deny\n", target)
                #expect(Self.camera(keeper) == .deny, "\(file) edited through its other name (\(hard ? "hard link" : "symlink"))")
            }
        }
        // A hard link made after the policy was kept: edited through it.
        let (config, main) = try Self.config()
        let keeper = try Self.kept(config.path, .allow)
        let other = elsewhere.path + "/later.conf"
        #expect(link(main, other) == 0)
        _ = Self.camera(keeper)
        try Self.writeInPlace("[camera]\nDefault=deny\n", other)
        #expect(Self.camera(keeper) == .deny, "edited through a hard link made after the policy was kept")
    }

    @Test func aSymlinkedDirectoryIsNeverKept() throws {
        let (config, _) = try Self.config()
        let links = try TemporaryDirectory()
        let link = links.path + "/devaccess"
        #expect(symlink(config.path, link) == 0)
        let keeper = PolicyKeeper(directory: link, log: BrokerLog(target: .none))
        let before = keeper.reads.load(ordering: .relaxed)
        for _ in 0..<3 { #expect(Self.camera(keeper) == .allow) }
        #expect(keeper.reads.load(ordering: .relaxed) == before + 3, "read every time: the link can be retargeted unseen")
    }

    @Test func withoutWatchesEveryAskReads() throws {
        let (config, _) = try Self.config()
        let keeper = PolicyKeeper(directory: config.path, log: BrokerLog(target: .none), failWatchesWith: ENOSPC)
        for _ in 0..<3 { #expect(Self.camera(keeper) == .allow) }
        #expect(keeper.reads.load(ordering: .relaxed) == 3)
        // DEVACCESSD_STATUS_CACHE=off: the same.
        let off = PolicyKeeper(directory: config.path, log: BrokerLog(target: .none), keeps: false)
        for _ in 0..<3 { #expect(Self.camera(off) == .allow) }
        #expect(off.reads.load(ordering: .relaxed) == 3)
    }

    /// IN_Q_OVERFLOW (watch -1, events lost) and IN_IGNORED (a watch removed: the directory
    /// deleted, its file system unmounted) drop what was kept; of the parent's records only
    /// those about the policy directory itself count.
    @Test func overflowAndRemovedWatchesDropWhatWasKept() {
        let parent: CInt = 7
        let name = "devaccess"
        func drops(_ watch: CInt, _ mask: Int32, _ entry: String = "") -> Bool {
            PolicyFilesWatch.invalidates(InotifyRecord(watch: watch, mask: UInt32(mask), name: entry),
                                         parentWatch: parent, name: name)
        }
        #expect(drops(-1, IN_Q_OVERFLOW))
        #expect(drops(3, IN_IGNORED))
        #expect(drops(parent, IN_IGNORED))
        #expect(drops(parent, IN_DELETE_SELF))
        #expect(drops(parent, IN_MOVED_TO, name))
        #expect(drops(parent, IN_ATTRIB, name))
        #expect(!drops(parent, IN_CREATE, "passwd"), "another entry of the parent")
        for mask in [IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO, IN_CLOSE_WRITE, IN_MODIFY, IN_ATTRIB] {
            #expect(drops(3, mask, "anything"))
        }
        #expect(!PolicyFilesWatch.isLocal("/proc"), "only file systems on the list count as local")
        #expect(PolicyFilesWatch.fileSystemType("/proc") == 0x9FA0, "procfs's magic")
        #expect(PolicyFilesWatch.fileSystemType("/no/such/path") == nil)
    }
}
