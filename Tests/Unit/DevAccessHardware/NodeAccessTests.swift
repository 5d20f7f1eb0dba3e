import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import Foundation
import Glibc
@testable import DevAccessHardware
import DevAccessACL

/// The evaluator against the kernel: real users, real nodes, real ACLs, and a child
/// process that really opens the node as that user. They must always agree.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users, device nodes and ACLs"))
struct NodeAccessTests {
    let directory: TemporaryDirectory
    let alice: TestUser
    let bob: TestUser
    let crew: TestGroup

    init() throws {
        directory = try TemporaryDirectory()
        alice = try TestUser("alice")
        bob = try TestUser("bob")
        crew = try TestGroup("crew", members: [alice])
    }

    /// Compares the evaluator with real opens for O_RDONLY, O_WRONLY and O_RDWR.
    func expectAgreement(_ path: String, _ user: TestUser, expected: AccessMode,
                         sourceLocation: SourceLocation = #_sourceLocation) throws {
        let facts = try NodeInspector.inspect(path)
        let identity = try UserDatabase.identity(for: user.name)
        let result = AccessEvaluator.evaluate(facts, for: identity)
        #expect(result.access == expected, "evaluator for \(user.name) on \(path)", sourceLocation: sourceLocation)
        try expectKernelAgrees(facts, user, identity, result, sourceLocation: sourceLocation)
    }

    /// Each of O_RDONLY, O_WRONLY and O_RDWR as the user, against `permits` and against what
    /// the evaluation reports (`access` for a read-write open, `separately` for each mode alone).
    func expectKernelAgrees(_ facts: NodeFacts, _ user: TestUser, _ identity: UserIdentity,
                            _ result: AccessEvaluator.Result, context: String = "",
                            sourceLocation: SourceLocation = #_sourceLocation) throws {
        for (want, mode) in [(AccessMode.read, TestUser.OpenMode.read), (.write, .write), (.readWrite, .readWrite)] {
            let predicted = AccessEvaluator.permits(want, on: facts, for: identity)
            let real = try user.canOpen(facts.path, mode)
            #expect(predicted == real, "\(want) for \(user.name) on \(facts.path)\(context): evaluator \(predicted), kernel \(real)",
                    sourceLocation: sourceLocation)
            let reported = want == .readWrite ? result.access == .readWrite : result.separately.contains(want)
            let report = "reported \(want) for \(user.name)\(context): access \(result.access.symbolic), "
                + "separately \(result.separately.symbolic), kernel \(real)"
            #expect(reported == real, "\(report)", sourceLocation: sourceLocation)
        }
    }

    @Test func ownerBitsDecideForTheOwner() throws {
        let node = try directory.makeNullNode("owner", owner: alice.name, group: crew.name, mode: "0466")
        try expectAgreement(node, alice, expected: .read)
    }

    @Test func owningGroupBits() throws {
        let node = try directory.makeNullNode("group", group: crew.name, mode: "0640")
        try expectAgreement(node, alice, expected: .read)
        try expectAgreement(node, bob, expected: .none)
    }

    @Test func otherOnly() throws {
        let node = try directory.makeNullNode("other", mode: "0606")
        try expectAgreement(node, bob, expected: .readWrite)
        try expectAgreement(node, alice, expected: .readWrite)
    }

    @Test func namedUserEntry() throws {
        let node = try directory.makeNullNode("named-user", group: "root", mode: "0600")
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):rw", node])
        try expectAgreement(node, bob, expected: .readWrite)
        try expectAgreement(node, alice, expected: .none)
    }

    @Test func namedGroupEntry() throws {
        let node = try directory.makeNullNode("named-group", mode: "0600")
        try TestProcess.setup("setfacl", ["-m", "g:\(crew.name):rw", node])
        try expectAgreement(node, alice, expected: .readWrite)
        try expectAgreement(node, bob, expected: .none)
    }

    @Test func maskLimitsNamedEntries() throws {
        let node = try directory.makeNullNode("mask", mode: "0600")
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):rw,g:\(crew.name):rw,m::r", node])
        let facts = try NodeInspector.inspect(node)
        #expect(facts.acl?.contains { $0.tag == .mask && $0.permissions == .read } == true)
        try expectAgreement(node, bob, expected: .read)
        try expectAgreement(node, alice, expected: .read)
    }

    @Test func emptyMaskSendsNamedEntriesToTheModeBits() throws {
        let node = try directory.makeNullNode("empty-mask", mode: "0604")
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):rw,g:\(crew.name):rw,m::---", node])
        try expectAgreement(node, bob, expected: .read)
        try expectAgreement(node, alice, expected: .read)
    }

    @Test func groupClassWithoutTheBitsBlocksOther() throws {
        // alice matches the owning group, which has nothing; 'other' would give rw but does not apply.
        let node = try directory.makeNullNode("blocked", group: crew.name, mode: "0606")
        try expectAgreement(node, alice, expected: .none)
        try expectAgreement(node, bob, expected: .readWrite)
    }

    @Test func readAndWriteFromDifferentGroupsIsNotReadWrite() throws {
        let second = try TestGroup("second", members: [alice])
        let node = try directory.makeNullNode("split", group: crew.name, mode: "0640")
        try TestProcess.setup("setfacl", ["-m", "g:\(second.name):w", node])
        try expectAgreement(node, alice, expected: .read)
        let facts = try NodeInspector.inspect(node)
        let identity = try UserDatabase.identity(for: alice.name)
        #expect(AccessEvaluator.permits(.write, on: facts, for: identity))
        #expect(!AccessEvaluator.permits(.readWrite, on: facts, for: identity))
        // Status says what the kernel allows: each mode alone, and that read-write is refused.
        let result = AccessEvaluator.evaluate(facts, for: identity)
        #expect(result.separately == .readWrite && result.readWriteOnlySeparately)
        let sentence = AccessExplanation.sentence(facts: facts, required: .readWrite, result: result, user: identity)
        #expect(sentence.contains("has read, needs readwrite (member of group '\(crew.name)'"), "\(sentence)")
        #expect(sentence.contains("it can also open it write-only (member of group '\(second.name)'), "
                                  + "but a read-write open is refused"), "\(sentence)")
    }

    /// Random owners, groups, modes, named entries and masks: every evaluation agrees with the
    /// kernel for each open mode (issue 27, item 9: status said r-- where write-only opened too).
    @Test func randomNodesAgreeWithTheKernel() throws {
        let second = try TestGroup("second", members: [alice, bob])
        var random = SplitMix(seed: 27_09)
        let owners = ["root", alice.name, bob.name]
        let groups = ["root", crew.name, second.name]
        let tags = ["u:\(alice.name)", "u:\(bob.name)", "g:\(crew.name)", "g:\(second.name)", "g:root"]
        for index in 0..<60 {
            let mode = String((0..<3).map { _ in Character(String(random.next(below: 7) & 6)) })
            let node = try directory.makeNullNode("random-\(index)", owner: owners[random.next(below: 3)],
                                                  group: groups[random.next(below: 3)], mode: "0" + mode)
            let entries = tags.filter { _ in random.next(below: 2) == 0 }
                .map { "\($0):\(["r", "w", "rw", "-"][random.next(below: 4)])" }
            if !entries.isEmpty {
                let mask = random.next(below: 3) == 0 ? ["m::\(["r", "w", "rw", "-"][random.next(below: 4)])"] : []
                try TestProcess.setup("setfacl", ["-m", (entries + mask).joined(separator: ","), node])
            }
            let facts = try NodeInspector.inspect(node)
            for user in [alice, bob] {
                let identity = try UserDatabase.identity(for: user.name)
                try expectKernelAgrees(facts, user, identity, AccessEvaluator.evaluate(facts, for: identity),
                                       context: " (case \(index): \(facts.modeOctal) \(facts.acl?.map(\.text) ?? []))")
            }
        }
    }

    @Test func inspectorReportsOwnerGroupModeAndACL() throws {
        let node = try directory.makeNullNode("facts", owner: alice.name, group: crew.name, mode: "0640")
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):r", node])
        let facts = try NodeInspector.inspect(node)
        #expect(facts.kind == .characterDevice)
        #expect((facts.major, facts.minor) == (1, 3))
        #expect(facts.ownerName == alice.name && facts.groupName == crew.name)
        #expect(facts.acl?.map(\.text) == ["user::rw-", "user:\(bob.name):r--", "group::r--", "mask::r--", "other::---"])
    }

    @Test func inspectorRefusesToFollowSymlinksAndReportsVanishedNodes() throws {
        let node = try directory.makeNullNode("target", mode: "0666")
        try TestProcess.setup("ln", ["-s", node, "\(directory.path)/link"])
        #expect(try NodeInspector.inspect("\(directory.path)/link").kind == .symlink)
        #expect(throws: NodeInspector.InspectionError.vanished("\(directory.path)/gone")) {
            try NodeInspector.inspect("\(directory.path)/gone")
        }
    }
}

/// alsa-lib's answer for a control node it could not open is checked against the node
/// itself (`AlsaCard.nodeProblem`); the real EACCES case (a user out of group audio) runs
/// in the VM scenario `access`. Here, as root: a node that agrees names nothing, one whose
/// errno differs is named with its own.
@Suite struct AlsaNodeProblemTests {
    @Test func theNodesOwnErrnoIsNamedWhenItDiffers() throws {
        let directory = try TemporaryDirectory()
        let missing = directory.path + "/controlC9"
        #expect(AlsaCard.nodeProblem(missing, reported: ENOENT) == nil, "alsa-lib said ENOENT and the node agrees")
        // A directory where the node should be: open() says EISDIR, not alsa-lib's ENOENT.
        try FileManager.default.createDirectory(atPath: missing, withIntermediateDirectories: false)
        let problem = try #require(AlsaCard.nodeProblem(missing, reported: ENOENT))
        #expect(problem.path == missing && problem.errno.rawValue == EISDIR)
        let error = AlsaCard.ProbeError(card: 9, code: -ENOENT, node: problem)
        #expect(error.description == "alsa-lib could not open the control device of card 9: \(missing): \(problem.errno)")
        // /dev/null opens: nothing to add to alsa-lib's answer.
        #expect(AlsaCard.nodeProblem("/dev/null", reported: ENOENT) == nil)
    }
}

/// A small seeded generator, so a failing random case is the same case on the next run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next(below bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }
}
