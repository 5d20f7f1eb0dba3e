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
}
