import Testing
import DevAccessCore
import DevAccessLedger
@testable import DevAccessBroker

/// The authorization table (`AccessRules.judge`), checked against a matrix written by hand
/// from the rules in devaccess(1) and docs/security.md, not from the code: review this
/// table on its own. A = allowed, P = allowed and judged as the run's program,
/// W = allowed within the run (its permissions, its location level), R = refused.
///
/// The callers: root; an administrator; a user acting on self; a subordinate uid; a user's
/// process in a run given the camera; one in a strict run given the camera and location at
/// street level. "another user" rows are the same callers acting on someone else.
struct AuthorizationMatrixTests {
    static let program = Program(path: "/usr/bin/cheese")
    static let run = RunScope(id: 7, gid: RunGroups.first + 6, strict: false, permissions: [.camera], program: program)
    static let strictRun = RunScope(id: 8, gid: RunGroups.first + 7, strict: true, permissions: [.camera, .location],
                                    program: program, accuracy: .street)

    static let callers: [(String, KernelCaller)] = [
        ("root", KernelCaller(uid: 0, standing: .root)),
        ("admin", KernelCaller(uid: 1001, standing: .admin)),
        ("user", KernelCaller(uid: 1002, standing: .user)),
        ("subordinate", KernelCaller(uid: 100_000, standing: .subordinate)),
        ("run", KernelCaller(uid: 1002, standing: .user, run: run)),
        ("strict", KernelCaller(uid: 1002, standing: .user, run: strictRun)),
    ]

    //                 operation                       root admin user sub run strict
    static let matrix: [(String, AccessRules.Action, AccessRules.Target, String)] = [
        ("status of self",            .status, .itself,                                        "A A A A A A"),
        ("status of another user",    .status, .anotherUser,                                   "A A R R R R"),
        ("pending/approve/reject",    .administer, .itself,                                    "A A R R R R"),
        ("request camera",            .request([.camera], accuracy: nil), .itself,             "A A A A P W"),
        ("request microphone",        .request([.microphone], accuracy: nil), .itself,         "A A A A P R"),
        ("request camera+microphone", .request([.camera, .microphone], accuracy: nil), .itself, "A A A A P R"),
        ("request location exact",    .request([.location], accuracy: .exact), .itself,        "A A A A P R"),
        ("request location street",   .request([.location], accuracy: .street), .itself,       "A A A A P W"),
        ("request location city",     .request([.location], accuracy: .city), .itself,         "A A A A P W"),
        ("open camera",               .open(.camera), .itself,                                 "A A A A A W"),
        ("open microphone",           .open(.microphone), .itself,                             "A A A A A R"),
        ("run camera",                .run([.camera], strict: false), .itself,                 "A A A A A R"),
        ("run camera --strict",       .run([.camera], strict: true), .itself,                  "A A A A A R"),
        ("location at the grant",     .location(nil), .itself,                                 "A A A A A W"),
        ("location street",           .location(.street), .itself,                             "A A A A A W"),
        ("location exact",            .location(.exact), .itself,                              "A A A A A R"),
        ("request for another user",  .request([.camera], accuracy: nil), .anotherUser,        "A A R R R R"),
    ]

    static func symbol(_ verdict: AccessRules.Verdict) -> String {
        switch verdict {
        case .allowed: return "A"
        case .asProgram: return "P"
        case .withinRun: return "W"
        case .refused: return "R"
        }
    }

    @Test func everyCellIsAsWritten() {
        #expect(Self.callers.map { $0.1.kind } == [.root, .admin, .user, .subordinate, .inRun, .inStrictRun])
        for (name, action, target, expected) in Self.matrix {
            let got = Self.callers.map { Self.symbol(AccessRules.judge(action, caller: $0.1, target: target)) }
            #expect(got.joined(separator: " ") == expected, "\(name): root admin user sub run strict")
        }
    }

    /// An administrator's program in a strict run is no administrator; in a plain run it is.
    @Test func aStrictRunIsNeverAnAdministrator() {
        let strictAdmin = KernelCaller(uid: 1001, standing: .admin, run: Self.strictRun)
        let plainAdmin = KernelCaller(uid: 1001, standing: .admin, run: Self.run)
        #expect(AccessRules.judge(.administer, caller: strictAdmin).isRefused)
        #expect(AccessRules.judge(.status, caller: strictAdmin, target: .anotherUser).isRefused)
        #expect(AccessRules.judge(.administer, caller: plainAdmin) == .allowed)
        #expect(AccessRules.judge(.status, caller: plainAdmin, target: .anotherUser) == .allowed)
    }

    /// A strict run not given location (or whose level is not known) gets none; a run group
    /// id the ledger cannot name is a strict run given nothing.
    @Test func whatAStrictRunWasNotGivenItDoesNotGet() {
        var cameraOnly = Self.strictRun
        cameraOnly.permissions = [.camera]
        cameraOnly.accuracy = nil
        let caller = KernelCaller(uid: 1002, standing: .user, run: cameraOnly)
        #expect(AccessRules.judge(.location(nil), caller: caller).isRefused)
        #expect(AccessRules.judge(.request([.location], accuracy: .country), caller: caller).isRefused)
        var levelUnknown = Self.strictRun
        levelUnknown.accuracy = nil
        #expect(AccessRules.judge(.location(nil), caller: KernelCaller(uid: 1002, standing: .user, run: levelUnknown))
            .isRefused)
        let unknown = KernelCaller(uid: 1002, standing: .user, run: .unrecorded(gid: RunGroups.first))
        #expect(AccessRules.judge(.open(.camera), caller: unknown).isRefused)
        #expect(AccessRules.judge(.status, caller: unknown) == .allowed)
    }

    /// Every refusal says what the run was given and why, for the person reading it.
    @Test func aRefusalNamesTheRunAndWhy() {
        let strict = KernelCaller(uid: 1002, standing: .user, run: Self.strictRun)
        guard case .refused(let reason) = AccessRules.judge(.open(.microphone), caller: strict) else {
            Issue.record("not refused")
            return
        }
        #expect(reason.contains("/usr/bin/cheese") && reason.contains("camera and location") && reason.contains("--strict"),
                "\(reason)")
    }
}
