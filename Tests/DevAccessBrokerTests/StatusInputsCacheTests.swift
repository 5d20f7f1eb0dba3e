import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessEnforcement
import DevAccessLedger
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
        ]
        for (text, onlyFiles) in cases {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            #expect(StatusInputsCache.nssOnlyFiles(path) == onlyFiles, "\(text)")
        }
        #expect(!StatusInputsCache.nssOnlyFiles(directory.path + "/absent"))
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
        cache.keep(Array(#"{"id":7,"version":2,"type":"status"}"#.utf8), for: odd, id: 7, from: inputs)
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
