import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessHardware
import DevAccessLedger
import DevAccessSystem
import DevAccessTestSupport
@testable import DevAccessBroker

/// StatusInputsCache in process: what it keeps, and that each kind of change drops it
/// before the next lookup (no thread has to wake first). The daemon-level truth tests are
/// StatusFreshnessTests.
@Suite(.serialized, .enabled(if: isRoot, "makes nodes (mknod)"))
struct StatusInputsCacheTests {
    static func read() -> BrokerService.DecisionRead {
        BrokerService.DecisionRead(grants: [], records: [], problem: nil, policy: .loaded(Policy()))
    }

    @Test func aDecisionReadIsKeptUntilThePolicyOrStateDirectoryChanges() throws {
        let config = try TemporaryDirectory()
        let state = try TemporaryDirectory()
        let cache = StatusInputsCache(policyDirectory: config.path, ledgerDirectory: state.path,
                                      log: BrokerLog(target: .none))
        func keep() {
            let generations = cache.generations()
            cache.store(Self.read(), readAt: Date(), readUnder: generations)
        }
        keep()  // the first sets the watches: not kept
        #expect(cache.lookup([], decisions: true).decisions == nil)
        keep()
        #expect(cache.lookup([], decisions: true).decisions != nil, "a second read with the watches standing is kept")

        try Data("[camera]\nDefault=deny\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        #expect(cache.lookup([], decisions: true).decisions == nil, "a policy file written")

        keep()
        #expect(cache.lookup([], decisions: true).decisions != nil)
        try Data("x".utf8).write(to: URL(fileURLWithPath: state.path + "/ledger.db-wal"))
        #expect(cache.lookup([], decisions: true).decisions == nil, "the ledger written by another process")

        keep()
        cache.invalidate([.decisions])
        #expect(cache.lookup([], decisions: true).decisions == nil, "a commit of this process")

        // A read begun before a change is not kept.
        let before = cache.generations()
        try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        cache.store(Self.read(), readAt: Date(), readUnder: before)
        #expect(cache.lookup([], decisions: true).decisions == nil, "a read that a change overtook")
    }

    @Test func aDecisionReadEndsWithItsFirstGrant() throws {
        let config = try TemporaryDirectory()
        let cache = StatusInputsCache(policyDirectory: config.path, ledgerDirectory: nil, log: BrokerLog(target: .none))
        var read = Self.read()
        let end = Date().addingTimeInterval(1)
        read.switches = [PrivacySwitch(permission: .camera, hard: false, by: Principal(uid: 0, name: "root"),
                                       since: Date(), until: end)]
        for _ in 0..<2 { cache.store(read, readAt: Date(), readUnder: cache.generations()) }
        let kept = cache.lookup([], decisions: true).decisions
        // Judged only when the lookup came before the switch's end (a loaded machine can stall).
        if Date() < end { #expect(kept != nil) }
        while Date() <= end { usleep(10_000) }
        #expect(cache.lookup([], decisions: true).decisions == nil, "kept past the end of a switch it holds")
        // A read made "in the future" (the clock went back since) is not served.
        for _ in 0..<2 { cache.store(Self.read(), readAt: Date().addingTimeInterval(60), readUnder: cache.generations()) }
        #expect(cache.lookup([], decisions: true).decisions == nil)
    }

    @Test func aReportIsDroppedWhenItsNodeChanges() throws {
        let nodes = try TemporaryDirectory()
        let node = try nodes.makeNullNode("video0")
        let cache = StatusInputsCache(policyDirectory: nodes.path, ledgerDirectory: nil, log: BrokerLog(target: .none))
        let report = AdapterReport(permission: .camera, devices: [Device(
            permission: .camera, id: "camera:t", name: "t",
            nodes: [DeviceNode(path: node, role: "capture", required: .readWrite, state: .unusable("not inspected"))])])
        func keep() { cache.store(report, readUnder: cache.generations()) }
        keep()
        keep()
        #expect(cache.lookup([.camera], decisions: false).reports[.camera] != nil)
        for change in ["setfacl -m u:nobody:rw '\(node)'", "chmod 0666 '\(node)'", "chown nobody '\(node)'",
                       "rm '\(node)' && mknod -m 0600 '\(node)' c 1 3"] {
            keep()
            keep()
            #expect(cache.lookup([.camera], decisions: false).reports[.camera] != nil, "before \(change)")
            try StatusFreshnessTests.shell(change)
            #expect(cache.lookup([.camera], decisions: false).reports[.camera] == nil, "kept after \(change)")
        }
        // The node made again is a new inode: the first report after it sets a new watch.
        keep()
        #expect(cache.lookup([.camera], decisions: false).reports[.camera] == nil, "kept before its new node's watch stood")
        keep()
        #expect(cache.lookup([.camera], decisions: false).reports[.camera] != nil)
        try TestProcess.setup("setfacl", ["-m", "u:nobody:r", "\(node)"])
        #expect(cache.lookup([.camera], decisions: false).reports[.camera] == nil, "the new node is watched")
    }

    @Test func withoutWatchesNothingIsKept() throws {
        let config = try TemporaryDirectory()
        let cache = StatusInputsCache(policyDirectory: config.path, ledgerDirectory: nil, log: BrokerLog(target: .none),
                                      failWatchesWith: ENOSPC)
        for _ in 0..<3 { cache.store(Self.read(), readAt: Date(), readUnder: cache.generations()) }
        #expect(cache.lookup([], decisions: true).decisions == nil)
        #expect(cache.identity(uid: 0)?.uid == 0, "identities are still answered, read afresh")
    }

    @Test func nsswitchWithOnlyFilesNeedsNoLifetime() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/nsswitch.conf"
        let cases: [(String, Bool)] = [
            ("passwd: files\ngroup: files\n", true),
            ("passwd:  files # local\ngroup:\tfiles [NOTFOUND=return]\nhosts: files dns\n", true),
            ("passwd: files systemd\ngroup: files systemd\n", false),
            ("passwd: files\ngroup: files sss\n", false),
            ("passwd: compat\ngroup: files\n", false),
            ("passwd: files\n", false),  // group: glibc's default
            // getgrouplist follows `initgroups` when the line is there (glibc), `group` otherwise.
            ("passwd: files\ngroup: files\ninitgroups: files sss\n", false),
            ("passwd: files\ngroup: files\ninitgroups:sss\n", false),
            ("passwd: files\ngroup: files\nInitGroups: files [SUCCESS=merge] systemd\n", false),
            ("passwd: files\ngroup: files\ninitgroups: files\n", true),
            ("passwd: files\ninitgroups: files\n", false),  // group still glibc's default
        ]
        for (text, onlyFiles) in cases {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            #expect(StatusInputsCache.nssOnlyFiles(path) == onlyFiles, "\(text)")
        }
        #expect(!StatusInputsCache.nssOnlyFiles(directory.path + "/absent"))
    }

    // MARK: - Identities: changes /etc's watch would not see (issue 17, L5)

    /// An accounts directory whose databases are regular files and whose nsswitch.conf
    /// names `files` only: what the cache keeps without a lifetime. The identity itself is
    /// NSS's (uid 0); the directory only decides what is watched and trusted.
    static func accounts(nsswitch: String = "passwd: files\ngroup: files\n") throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory()
        try Data("root:x:0:0:root:/root:/bin/sh\n".utf8).write(to: URL(fileURLWithPath: directory.path + "/passwd"))
        try Data("root:x:0:\n".utf8).write(to: URL(fileURLWithPath: directory.path + "/group"))
        try Data(nsswitch.utf8).write(to: URL(fileURLWithPath: directory.path + "/nsswitch.conf"))
        return directory
    }

    static func identityCache(_ accounts: TemporaryDirectory) -> StatusInputsCache {
        StatusInputsCache(policyDirectory: accounts.path, ledgerDirectory: nil, log: BrokerLog(target: .none),
                          accountsDirectory: accounts.path, nscdSocket: accounts.path + "/no-nscd")
    }

    /// Looks uid 0 up until the cache keeps it (the first lookup sets the watch).
    static func keepRoot(_ cache: StatusInputsCache) {
        for _ in 0..<3 { _ = cache.identity(uid: 0) }
    }

    /// A writer that changes /etc/group in place and has not closed it yet (`echo >>`
    /// from a shell that is still writing, a config tool holding the file): NSS already
    /// reads the new line, so the kept identity must go with the write, not the close.
    @Test func aGroupFileWrittenInPlaceDropsTheKeptIdentityBeforeItIsClosed() throws {
        let accounts = try Self.accounts()
        let cache = Self.identityCache(accounts)
        Self.keepRoot(cache)
        #expect(cache.keptIdentity(uid: 0).0 != nil, "an identity under files-only NSS is kept")

        let fd = open(accounts.path + "/group", O_WRONLY | O_APPEND | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        let line = Array("frshinpl:x:4711:root\n".utf8)
        #expect(line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == line.count)
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept after an in-place write (the writer still holds it)")

        // Truncated in place (`: > group` from a tool that then writes it again).
        Self.keepRoot(cache)
        #expect(cache.keptIdentity(uid: 0).0 != nil)
        #expect(ftruncate(fd, 0) == 0)
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept after the group file was truncated in place")

        // Other files in the directory written in place do not drop it.
        Self.keepRoot(cache)
        try Data("x".utf8).write(to: URL(fileURLWithPath: accounts.path + "/hostname"))
        #expect(cache.keptIdentity(uid: 0).0 != nil, "a write to another file dropped the identity")
    }

    /// nsswitch.conf (or a database) that is a symlink, or a database with a second hard
    /// link: an edit through the other name happens where /etc's watch sees nothing, so
    /// identities are not kept at all.
    @Test func anNsswitchOrDatabaseReachedThroughAnotherNameIsNotKept() throws {
        let elsewhere = try TemporaryDirectory()
        let target = elsewhere.path + "/nsswitch.conf"
        try Data("passwd: files\ngroup: files\n".utf8).write(to: URL(fileURLWithPath: target))

        let linked = try Self.accounts()
        try FileManager.default.removeItem(atPath: linked.path + "/nsswitch.conf")
        try FileManager.default.createSymbolicLink(atPath: linked.path + "/nsswitch.conf", withDestinationPath: target)
        let cache = Self.identityCache(linked)
        Self.keepRoot(cache)
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept while nsswitch.conf is a symlink")
        try Data("passwd: files\ngroup: files sss\n".utf8).write(to: URL(fileURLWithPath: target))
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept after the symlink's target changed")

        let hard = try Self.accounts()
        #expect(link(hard.path + "/group", elsewhere.path + "/group") == 0)
        let hardCache = Self.identityCache(hard)
        Self.keepRoot(hardCache)
        #expect(hardCache.keptIdentity(uid: 0).0 == nil, "kept while the group file has another name elsewhere")
    }

    /// `initgroups: files sss` with `group: files`: the supplementary groups come from
    /// SSSD, which no event covers, so the identity lives `nssLifetime` only.
    @Test func anInitgroupsLineWithAnotherSourceGivesTheLifetime() throws {
        let accounts = try Self.accounts(nsswitch: "passwd: files\ngroup: files\ninitgroups: files sss\n")
        let cache = Self.identityCache(accounts)
        Self.keepRoot(cache)
        let kept = MonotonicClock.microseconds()
        while MonotonicClock.microseconds() &- kept < StatusInputsCache.nssLifetime + 100_000 { usleep(20_000) }
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept past the lifetime with initgroups from sss")
    }

    /// nscd running: glibc asks it before the files, and it may answer with a list it has
    /// not yet forgotten after /etc changed, so "files only" is not enough to keep forever.
    @Test func aRunningNscdGivesTheLifetime() throws {
        let accounts = try Self.accounts()
        let socketPath = accounts.path + "/nscd-socket"
        let listener = try Listener(path: socketPath)
        defer { listener.close() }
        let cache = StatusInputsCache(policyDirectory: accounts.path, ledgerDirectory: nil, log: BrokerLog(target: .none),
                                      accountsDirectory: accounts.path, nscdSocket: socketPath)
        Self.keepRoot(cache)
        #expect(cache.keptIdentity(uid: 0).0 != nil, "not kept at all")
        let kept = MonotonicClock.microseconds()
        while MonotonicClock.microseconds() &- kept < StatusInputsCache.nssLifetime + 100_000 { usleep(20_000) }
        #expect(cache.keptIdentity(uid: 0).0 == nil, "kept past the lifetime while nscd listens")
        // Without nscd, the same files-only accounts are kept past it.
        let plain = Self.identityCache(accounts)
        Self.keepRoot(plain)
        let since = MonotonicClock.microseconds()
        while MonotonicClock.microseconds() &- since < StatusInputsCache.nssLifetime + 100_000 { usleep(20_000) }
        #expect(plain.keptIdentity(uid: 0).0 != nil, "files only, no nscd: kept without a lifetime")
    }

    // MARK: - Policy files reached through another name

    /// A policy file or drop-in that is a symlink (or has a second hard link): an edit of
    /// the other name gives no event on the policy directory, so the read is not kept.
    @Test func aPolicyFileReachedThroughAnotherNameIsNotKept() throws {
        let elsewhere = try TemporaryDirectory()
        for (index, file) in ["devaccess.conf", "conf.d/50-local.conf"].enumerated() {
            for hard in [false, true] {
                let config = try TemporaryDirectory()
                try FileManager.default.createDirectory(atPath: config.path + "/conf.d", withIntermediateDirectories: true)
                let target = elsewhere.path + "/\(index)-\(hard).conf"
                try Data("[camera]\nDefault=ask\n".utf8).write(to: URL(fileURLWithPath: target))
                if hard {
                    #expect(link(target, config.path + "/" + file) == 0)
                } else {
                    try FileManager.default.createSymbolicLink(atPath: config.path + "/" + file,
                                                               withDestinationPath: target)
                }
                let cache = StatusInputsCache(policyDirectory: config.path, ledgerDirectory: nil,
                                              log: BrokerLog(target: .none))
                for _ in 0..<3 { cache.store(Self.read(), readAt: Date(), readUnder: cache.generations()) }
                try Data("[camera]\nDefault=deny\n".utf8).write(to: URL(fileURLWithPath: target))
                #expect(cache.lookup([], decisions: true).decisions == nil,
                        "kept after \(file)'s other name (\(hard ? "hard link" : "symlink")) was edited")
            }
        }
    }

    // MARK: kept replies

    /// A cache whose decisions, identities (uid 0 and nobody) and camera report are kept.
    static func keptEverything(_ node: String, config: TemporaryDirectory, accounts: TemporaryDirectory,
                               read: BrokerService.DecisionRead = Self.read()) throws -> StatusInputsCache {
        // NSS from files only (no identity lifetime); the lookups themselves are the machine's.
        try Data("passwd: files\ngroup: files\n".utf8).write(to: URL(fileURLWithPath: accounts.path + "/nsswitch.conf"))
        for name in ["passwd", "group"] { try Data().write(to: URL(fileURLWithPath: accounts.path + "/" + name)) }
        let cache = StatusInputsCache(policyDirectory: config.path, ledgerDirectory: nil, log: BrokerLog(target: .none),
                                      accountsDirectory: accounts.path)
        let report = AdapterReport(permission: .camera, devices: [Device(
            permission: .camera, id: "camera:t", name: "t",
            nodes: [DeviceNode(path: node, role: "capture", required: .readWrite, state: .unusable("not inspected"))])])
        for _ in 0..<2 {
            cache.store(report, readUnder: cache.generations())
            cache.store(read, readAt: Date(), readUnder: cache.generations())
            _ = cache.identity(uid: 0)
            _ = cache.identity(uid: 65534)
        }
        return cache
    }

    static func line(version: Int64, id: Int64, user: String) -> [UInt8] {
        Array(#"{"version":\#(version),"id":\#(id),"type":"status","user":"\#(user)","permissions":[]}"#.utf8)
    }

    @Test func aKeptReplyIsServedOnlyForItsUidVersionAndPermissionsWithTheAskersID() throws {
        let nodes = try TemporaryDirectory()
        let node = try nodes.makeNullNode("video0")
        let accounts = try TemporaryDirectory()
        let config = try TemporaryDirectory()
        let cache = try Self.keptEverything(node, config: config, accounts: accounts)
        let root = StatusInputsCache.ReplyKey(uid: 0, version: 1, permissions: [.camera])
        let inputs = try #require(cache.keptInputs([.camera], uid: 0), "every input is kept")
        #expect(inputs.identity.uid == 0 && inputs.reports.map(\.permission) == [.camera])
        #expect(cache.keptReply(root, id: 5) == nil, "nothing kept yet")
        cache.keep(Self.line(version: 1, id: 5, user: "root"), for: root, id: 5, from: inputs)
        for id: Int64 in [5, 1, 77, 9_007_199_254_740_991, 100] {
            #expect(cache.keptReply(root, id: id) == Self.line(version: 1, id: id, user: "root"), "id \(id)")
        }
        for other in [StatusInputsCache.ReplyKey(uid: 65534, version: 1, permissions: [.camera]),
                      StatusInputsCache.ReplyKey(uid: 0, version: 8, permissions: [.camera]),
                      StatusInputsCache.ReplyKey(uid: 0, version: 1, permissions: [.camera, .microphone]),
                      StatusInputsCache.ReplyKey(uid: 0, version: 1, permissions: [])] {
            #expect(cache.keptReply(other, id: 5) == nil, "root's reply served for \(other)")
        }
        // Nobody's own reply, kept beside root's: each gets their own.
        let nobody = StatusInputsCache.ReplyKey(uid: 65534, version: 1, permissions: [.camera])
        let nobodyInputs = try #require(cache.keptInputs([.camera], uid: 65534))
        #expect(nobodyInputs.identity.uid == 65534)
        cache.keep(Self.line(version: 1, id: 9, user: "nobody"), for: nobody, id: 9, from: nobodyInputs)
        #expect(cache.keptReply(nobody, id: 3) == Self.line(version: 1, id: 3, user: "nobody"))
        #expect(cache.keptReply(root, id: 3) == Self.line(version: 1, id: 3, user: "root"))
        // A line not shaped `{"version":V,"id":ID,` (or with another id) is not kept.
        let odd = StatusInputsCache.ReplyKey(uid: 0, version: 2, permissions: [.camera])
        cache.keep(Self.line(version: 2, id: 6, user: "root"), for: odd, id: 7, from: inputs)
        cache.keep(Array(#"{"id":7,"version":1,"type":"status"}"#.utf8), for: odd, id: 7, from: inputs)
        #expect(cache.keptReply(odd, id: 7) == nil)

        // Any input changing drops every kept reply before the next lookup.
        try StatusFreshnessTests.shell("setfacl -m u:nobody:rw '\(node)'")
        #expect(cache.keptReply(root, id: 5) == nil && cache.keptReply(nobody, id: 5) == nil, "kept after setfacl")
        #expect(cache.keptReplyCount == 0)
        // Inputs looked up before a change are not kept from.
        let before = try #require(cache.keptInputs([], uid: 0))
        cache.invalidate([.decisions])
        cache.keep(Self.line(version: 1, id: 5, user: "root"), for: root, id: 5, from: before)
        #expect(cache.keptReply(root, id: 5) == nil, "a reply computed from inputs a change overtook")
    }

    @Test func aKeptReplyEndsWithItsFirstGrantOrSwitch() throws {
        let nodes = try TemporaryDirectory()
        let node = try nodes.makeNullNode("video0")
        let accounts = try TemporaryDirectory()
        let config = try TemporaryDirectory()
        var read = Self.read()
        let end = Date().addingTimeInterval(1)
        read.switches = [PrivacySwitch(permission: .camera, hard: false, by: Principal(uid: 0, name: "root"),
                                       since: Date(), until: end)]
        let cache = try Self.keptEverything(node, config: config, accounts: accounts, read: read)
        let key = StatusInputsCache.ReplyKey(uid: 0, version: 1, permissions: [.camera])
        if let inputs = cache.keptInputs([.camera], uid: 0) {
            cache.keep(Self.line(version: 1, id: 1, user: "root"), for: key, id: 1, from: inputs)
            let served = cache.keptReply(key, id: 2)
            // Judged only when the lookup came before the switch's end (a loaded machine can stall).
            if Date() < end { #expect(served != nil) }
        }
        while Date() <= end { usleep(10_000) }
        #expect(cache.keptReply(key, id: 3) == nil, "a reply kept past the end of a switch in its decisions")
        #expect(cache.keptInputs([.camera], uid: 0) == nil, "the decisions are not kept past it either")
    }

    @Test func keptRepliesAreBoundedLeastRecentlyServedFirst() throws {
        let nodes = try TemporaryDirectory()
        let node = try nodes.makeNullNode("video0")
        let accounts = try TemporaryDirectory()
        let config = try TemporaryDirectory()
        let cache = try Self.keptEverything(node, config: config, accounts: accounts)
        let inputs = try #require(cache.keptInputs([.camera], uid: 0))
        func key(_ uid: UInt32) -> StatusInputsCache.ReplyKey { .init(uid: uid, version: 1, permissions: [.camera]) }
        cache.keep(Self.line(version: 1, id: 1, user: "first"), for: key(1_000_000), id: 1, from: inputs)
        for uid in 0..<UInt32(StatusInputsCache.maxReplies + 10) {
            cache.keep(Self.line(version: 1, id: 1, user: "u\(uid)"), for: key(uid), id: 1, from: inputs)
            // The first one stays in use: it is never the least recently served.
            #expect(cache.keptReply(key(1_000_000), id: 1) != nil, "dropped while in use, at \(uid)")
        }
        #expect(cache.keptReplyCount == StatusInputsCache.maxReplies)
        #expect(cache.keptReply(key(0), id: 1) == nil, "the least recently served is dropped first")
        #expect(cache.keptReply(key(UInt32(StatusInputsCache.maxReplies + 9)), id: 1) != nil)
    }
}
